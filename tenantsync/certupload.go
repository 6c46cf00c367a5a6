package tenantsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// Bounds of an uploaded certificate, the API's (checked here before the
// upload is sent on, and again by the certificate store with the key's
// size and the chain's length); a tenant's count is its
// quotas.certificates, checked by the certificate store.
const (
	MaxCertificatePEM = api.MaxCertificatePEMLen
	MaxKeyPEM         = api.MaxCertificateKeyPEMLen
)

// CertificateStore stores the certificates agents upload from their
// clusters' kubernetes.io/tls Secrets: the Certificates API of the host
// (it validates the chain and key, the tenant's domains and quota).
type CertificateStore interface {
	Upload(ctx context.Context, req *pb.UploadCertificateRequest) (*pb.Certificate, error)
	Delete(ctx context.Context, req *pb.DeleteCertificateRequest) (*pb.DeleteCertificateResponse, error)
}

// ManagedCertificate reports whether a certificate name is one the agent
// uploads; the tenant's other certificates belong to the operator.
func ManagedCertificate(name string) bool { return strings.HasPrefix(name, syncspec.CertificatePrefix) }

// uploadCertificates writes a change's certificates, each on its own. It
// returns an error, which ends the stream, only when the cluster could not
// be written at all.
func (s *Server) uploadCertificates(ctx context.Context, tenant string, certs []*pb.SyncCertificate) ([]*pb.CertificateResult, error) {
	seen := map[string]bool{}
	for _, c := range certs {
		if seen[c.GetName()] {
			return nil, fmt.Errorf("certificate %s named twice in one change: %w", c.GetName(), ErrProtocol)
		}
		seen[c.GetName()] = true
	}
	out := make([]*pb.CertificateResult, len(certs))
	errs := make([]error, len(certs))
	parallel(len(certs), func(i int) {
		c := certs[i]
		r := &pb.CertificateResult{Name: c.GetName()}
		out[i] = r
		switch {
		case !ManagedCertificate(c.GetName()):
			r.Error = fmt.Sprintf("name: the agent uploads certificates named %s*; %s belongs to the operator", syncspec.CertificatePrefix, c.GetName())
		case len(c.GetCertPem()) > MaxCertificatePEM:
			r.Error = fmt.Sprintf("cert: %d bytes; at most %d", len(c.GetCertPem()), MaxCertificatePEM)
		case len(c.GetKeyPem()) > MaxKeyPEM:
			r.Error = fmt.Sprintf("key: %d bytes; at most %d", len(c.GetKeyPem()), MaxKeyPEM)
		case s.cfg.Certificates == nil:
			r.Error = "this LB host does not take certificates from agents"
		default:
			_, err := s.cfg.Certificates.Upload(ctx, &pb.UploadCertificateRequest{Tenant: tenant, Name: c.GetName(), CertPem: c.GetCertPem(), KeyPem: c.GetKeyPem()})
			switch {
			case err == nil:
			case unavailable(err):
				errs[i] = err
			default:
				r.Error = errorLine(err)
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("upload certificates: %w", err)
	}
	return out, nil
}

// removeCertificates deletes the agent's certificates that it names, and
// at the end of a resync those of the tenant it does not keep.
func (s *Server) removeCertificates(ctx context.Context, tenant string, ch *pb.SyncChange) ([]*pb.CertificateResult, error) {
	names := slices.Clone(ch.GetCertificateRemovals())
	if ch.GetResyncEnd() && s.cfg.Certificates != nil {
		objs, _, err := s.cfg.Store.List(ctx, api.KindCertificate, tenant)
		if err != nil {
			return nil, fmt.Errorf("list the tenant's certificates: %w", err)
		}
		for _, o := range objs {
			n := o.GetCertificate().GetName()
			if ManagedCertificate(n) && !slices.Contains(ch.GetKeepCertificates(), n) &&
				!slices.ContainsFunc(ch.GetCertificates(), func(c *pb.SyncCertificate) bool { return c.GetName() == n }) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]*pb.CertificateResult, len(names))
	errs := make([]error, len(names))
	parallel(len(names), func(i int) {
		r := &pb.CertificateResult{Name: names[i]}
		out[i] = r
		if !ManagedCertificate(names[i]) {
			r.Error = fmt.Sprintf("name: the agent removes only certificates named %s*", syncspec.CertificatePrefix)
			return
		}
		if s.cfg.Certificates == nil {
			r.Error = "this LB host does not take certificates from agents"
			return
		}
		_, err := s.cfg.Certificates.Delete(ctx, &pb.DeleteCertificateRequest{Tenant: tenant, Name: names[i]})
		switch {
		case err == nil:
			r.Removed = true
		case errors.Is(err, api.ErrNotFound), status.Code(err) == codes.NotFound:
			r.Removed = true
		case unavailable(err):
			errs[i] = err
		default:
			r.Error = errorLine(err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("remove certificates: %w", err)
	}
	return out, nil
}
