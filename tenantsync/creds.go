package tenantsync

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Credential validity bounds.
const (
	DefaultCredentialTTL = 365 * 24 * time.Hour
	MaxCredentialTTL     = 5 * 365 * 24 * time.Hour
)

// credService serves the operator's TenantCredentials calls.
type credService struct {
	pb.UnimplementedTenantCredentialsServer
	srv *Server
}

// Credentials returns the TenantCredentials service of s.
func (s *Server) Credentials() pb.TenantCredentialsServer { return &credService{srv: s} }

func (c *credService) tenant(ctx context.Context, name string) (*pb.Tenant, error) {
	if name == "" {
		return nil, toStatus(fmt.Errorf("tenant: required: %w", api.ErrInvalid))
	}
	o, err := c.srv.cfg.Store.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: name})
	if err != nil {
		return nil, toStatus(err)
	}
	return o.GetTenant(), nil
}

// Issue signs a new client certificate with the tenant's identity.
func (c *credService) Issue(ctx context.Context, req *pb.IssueCredentialsRequest) (*pb.IssueCredentialsResponse, error) {
	t, err := c.tenant(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(req.GetTtlSeconds()) * time.Second
	if ttl == 0 {
		ttl = DefaultCredentialTTL
	}
	if ttl > MaxCredentialTTL {
		return nil, toStatus(fmt.Errorf("ttl %s: at most %s: %w", ttl, MaxCredentialTTL, api.ErrInvalid))
	}
	ca := c.srv.cfg.Store.CA()
	certPEM, keyPEM, err := ca.Issue(pki.IssueRequest{Identity: pki.Identity{Role: pki.RoleTenant, Name: t.GetName(), UID: t.GetUid()}, TTL: ttl})
	if err != nil {
		return nil, toStatus(err)
	}
	cert, err := pki.ParseCert(certPEM)
	if err != nil {
		return nil, toStatus(err)
	}
	serial := SerialOf(cert)
	c.srv.log.Info("issued tenant credential", "tenant", t.GetName(), "credential", serial, "expires", cert.NotAfter)
	return &pb.IssueCredentialsResponse{
		CertPem: certPEM, KeyPem: keyPEM, CaPem: ca.CertPEM, Servers: c.srv.cfg.Store.APIAddrs(),
		Serial: serial, Expires: timestamppb.New(cert.NotAfter),
	}, nil
}

// Revoke adds serials to the tenant's revoked credentials and closes the
// streams on this host that use them; the other hosts close theirs when
// the change reaches them.
func (c *credService) Revoke(ctx context.Context, req *pb.RevokeCredentialsRequest) (*pb.RevokeCredentialsResponse, error) {
	if len(req.GetSerials()) == 0 {
		return nil, toStatus(fmt.Errorf("serials: name at least one credential serial (printed by tenant credentials): %w", api.ErrInvalid))
	}
	t, err := c.tenant(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	revoked := Revoked(t)
	fresh := map[string]bool{}
	for i, s := range req.GetSerials() {
		s = strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "0x"))
		if _, ok := new(big.Int).SetString(s, 16); !ok || s == "" {
			return nil, toStatus(fmt.Errorf("serials[%d]: %s is not a hexadecimal serial number: %w", i, api.Excerpt(req.GetSerials()[i]), api.ErrInvalid))
		}
		fresh[s] = true
		if !slices.Contains(revoked, s) {
			revoked = append(revoked, s)
		}
	}
	slices.Sort(revoked)
	next := proto.Clone(t).(*pb.Tenant)
	next.Meta = nil
	next.RevokedCredentials = revoked
	// Internal: the revoked list is the cluster's; an operator's apply of
	// the tenant cannot change it.
	if _, err := c.srv.cfg.Store.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{api.Wrap(next)}, Mode: pb.ApplyMode_APPLY_MODE_UPDATE}, true); err != nil {
		return nil, toStatus(err)
	}
	closed := c.srv.closeRevoked(t.GetName(), fresh)
	c.srv.log.Info("revoked tenant credentials", "tenant", t.GetName(), "serials", req.GetSerials(), "closed_streams", closed)
	return &pb.RevokeCredentialsResponse{Revoked: revoked, ClosedStreams: uint32(closed)}, nil
}
