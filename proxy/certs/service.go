package certs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// ServiceStore is what the Certificates API needs of the replicated
// state. *consensus.Node satisfies it.
type ServiceStore interface {
	Get(ctx context.Context, ref *pb.ObjectRef) (*pb.Object, error)
	List(ctx context.Context, kind, tenant string) ([]*pb.Object, uint64, error)
	// PutCertificate writes the object and the secret in one write.
	PutCertificate(ctx context.Context, cert *pb.Certificate, storageKey string, secret []byte) (*pb.Certificate, error)
	// DeleteCertificate removes the object and the secret in one write.
	DeleteCertificate(ctx context.Context, tenant, name, storageKey string) error
}

// Service implements the Certificates API. Keys go into the certificate
// store and are never returned: Certificate objects hold no key.
type Service struct {
	pb.UnimplementedCertificatesServer
	store ServiceStore
	now   func() time.Time
}

var _ pb.CertificatesServer = (*Service)(nil)

// NewService returns the Certificates API over store.
func NewService(store ServiceStore) *Service { return &Service{store: store, now: time.Now} }

// requestTimeout bounds a request whose caller set no deadline.
const requestTimeout = 15 * time.Second

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, requestTimeout)
}

// Upload validates and stores an uploaded certificate.
func (s *Service) Upload(ctx context.Context, req *pb.UploadCertificateRequest) (*pb.Certificate, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if req.GetTenant() == "" {
		return nil, api.ToStatus(fmt.Errorf("tenant: required (--tenant): %w", api.ErrInvalid))
	}
	to, err := s.store.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: req.GetTenant()})
	if err != nil {
		return nil, api.ToStatus(err)
	}
	c, secret, err := CheckUpload(to.GetTenant(), req.GetName(), req.GetCertPem(), req.GetKeyPem(), s.now())
	if err != nil {
		return nil, api.ToStatus(err)
	}
	if err := s.checkQuota(ctx, to.GetTenant(), c.GetName()); err != nil {
		return nil, api.ToStatus(err)
	}
	out, err := s.store.PutCertificate(ctx, c, UploadKey(c.GetTenant(), c.GetName()), secret)
	return out, api.ToStatus(err)
}

// checkQuota refuses a new certificate beyond quotas.certificates (the
// cluster default when unset).
// Replacing an uploaded certificate is always allowed.
func (s *Service) checkQuota(ctx context.Context, t *pb.Tenant, name string) error {
	q := int(api.EffectiveQuotas(t).GetCertificates())
	objs, _, err := s.store.List(ctx, api.KindCertificate, t.GetName())
	if err != nil {
		return err
	}
	used := 0
	for _, o := range objs {
		c := o.GetCertificate()
		switch {
		case c.GetName() == name && c.GetSource() == SourceUploaded:
			return nil
		case c.GetName() == name:
			return &api.ValidationError{Ref: "Certificate " + t.GetName() + "/" + name, Conflict: true,
				Errors: []api.FieldError{{Field: "name", Reason: "is the name of an ACME certificate; choose another"}}}
		case c.GetState() != StateRefused:
			used++
		}
	}
	if used >= q {
		return &api.ValidationError{Ref: "Certificate " + t.GetName() + "/" + name, Conflict: true,
			Errors: []api.FieldError{{Reason: fmt.Sprintf("tenant %s has reached its quota of %d certificates (quotas.certificates); delete one or ask the operator to raise it", t.GetName(), q)}}}
	}
	return nil
}

// List returns certificates, of one tenant when the request names it.
func (s *Service) List(ctx context.Context, req *pb.ListCertificatesRequest) (*pb.ListCertificatesResponse, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	objs, rev, err := s.store.List(ctx, api.KindCertificate, req.GetTenant())
	if err != nil {
		return nil, api.ToStatus(err)
	}
	out := &pb.ListCertificatesResponse{Revision: rev}
	for _, o := range objs {
		out.Certificates = append(out.Certificates, o.GetCertificate())
	}
	return out, nil
}

// Get returns one certificate.
func (s *Service) Get(ctx context.Context, req *pb.GetCertificateRequest) (*pb.Certificate, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if req.GetTenant() == "" || req.GetName() == "" {
		return nil, api.ToStatus(fmt.Errorf("a certificate is named by tenant and name (--tenant T NAME): %w", api.ErrInvalid))
	}
	o, err := s.store.Get(ctx, &pb.ObjectRef{Kind: api.KindCertificate, Tenant: req.GetTenant(), Name: req.GetName()})
	if err != nil {
		return nil, api.ToStatus(err)
	}
	return o.GetCertificate(), nil
}

// Delete removes an uploaded certificate and its key.
func (s *Service) Delete(ctx context.Context, req *pb.DeleteCertificateRequest) (*pb.DeleteCertificateResponse, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	c, err := s.Get(ctx, &pb.GetCertificateRequest{Tenant: req.GetTenant(), Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	if c.GetSource() != SourceUploaded {
		return nil, api.ToStatus(fmt.Errorf("certificate %s/%s comes from ACME and follows the load balancers' routes; remove the host from them instead: %w",
			req.GetTenant(), req.GetName(), api.ErrConflict))
	}
	err = s.store.DeleteCertificate(ctx, req.GetTenant(), req.GetName(), UploadKey(req.GetTenant(), req.GetName()))
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return nil, api.ToStatus(err)
	}
	return &pb.DeleteCertificateResponse{}, nil
}
