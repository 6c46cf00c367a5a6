package consensus

import (
	"context"
	"fmt"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// PutCertificate stores an uploaded certificate in one write: its
// Certificate object and, under storageKey in the certificate store
// (never readable through the API), its chain and private key. It returns
// the object as stored.
func (n *Node) PutCertificate(ctx context.Context, cert *pb.Certificate, storageKey string, secret []byte) (*pb.Certificate, error) {
	if storageKey == "" {
		return nil, fmt.Errorf("storage key must not be empty: %w", api.ErrInvalid)
	}
	item := &pb.StorageItem{Key: storageKey, Value: secret}
	err := n.txn(ctx,
		&pb.Op{Op: &pb.Op_Put{Put: api.Wrap(cert)}},
		&pb.Op{Op: &pb.Op_Put{Put: api.Wrap(item)}},
	)
	if err != nil {
		return nil, err
	}
	o, err := n.Get(ctx, &pb.ObjectRef{Kind: api.KindCertificate, Tenant: cert.GetTenant(), Name: cert.GetName()})
	if err != nil {
		return nil, err
	}
	return o.GetCertificate(), nil
}

// DeleteCertificate removes a Certificate object and everything stored
// under storageKey in one write. A certificate that load balancers still
// list is refused (api.ErrConflict).
func (n *Node) DeleteCertificate(ctx context.Context, tenant, name, storageKey string) error {
	if storageKey == "" {
		return fmt.Errorf("storage key must not be empty: %w", api.ErrInvalid)
	}
	return n.txn(ctx,
		&pb.Op{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindCertificate, Tenant: tenant, Name: name}}},
		&pb.Op{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindStorageItem, Name: storageKey}}, Prefix: true},
	)
}
