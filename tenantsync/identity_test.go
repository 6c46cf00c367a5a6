package tenantsync_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
)

// issued is a tenant credential issued through the admin API.
type issued struct {
	serial    string
	cert, key []byte
}

func (h *host) issue(t *testing.T, admin *grpc.ClientConn, tenant string) issued {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pb.NewTenantCredentialsClient(admin).Issue(ctx, &pb.IssueCredentialsRequest{Tenant: tenant})
	if err != nil {
		t.Fatalf("issue credentials for %s: %v", tenant, err)
	}
	return issued{serial: resp.GetSerial(), cert: resp.GetCertPem(), key: resp.GetKeyPem()}
}

// hello opens a tenant stream with cred and returns the error of its
// first answer (nil: welcomed).
func (h *host) hello(t *testing.T, cred issued) error {
	t.Helper()
	cfg, err := pki.ClientTLS(h.node.CA().CertPEM, cred.cert, cred.key)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := pb.NewTenantSyncClient(cc).Sync(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{Agent: "test"}}}); err != nil {
		return err
	}
	m, err := s.Recv()
	if err == nil && m.GetWelcome() == nil {
		t.Fatalf("first message %v, want a welcome or an error", m)
	}
	return err
}

func (h *host) adminApply(t *testing.T, admin *grpc.ClientConn, objs ...*pb.Object) *pb.ApplyResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pb.NewAdminClient(admin).Apply(ctx, &pb.ApplyRequest{Objects: objs})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return resp
}

// A revocation survives the operator re-applying the tenant's file, and
// credentials of a deleted tenant are refused for a new tenant of the
// same name.
func TestCredentialsBoundToTenantIdentity(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	admin := h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "ops"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	file := &pb.Tenant{Name: "acme", Domains: []string{"acme.example"}, Networks: []string{"10.20.0.0/16"}, Pools: []string{"public"}}
	a, b := h.issue(t, admin, "acme"), h.issue(t, admin, "acme")
	if err := h.hello(t, a); err != nil {
		t.Fatalf("fresh credential refused: %v", err)
	}
	if _, err := pb.NewTenantCredentialsClient(admin).Revoke(ctx, &pb.RevokeCredentialsRequest{Tenant: "acme", Serials: []string{a.serial}}); err != nil {
		t.Fatal(err)
	}
	// The operator applies the unchanged file, and a file that lists no
	// revocations at all, and one that claims another uid.
	if r := h.adminApply(t, admin, api.Wrap(file)).GetResults(); r[0] != "unchanged" {
		t.Errorf("re-applying the unchanged tenant: %v, want unchanged", r)
	}
	forged := &pb.Tenant{Name: "acme", Domains: []string{"acme.example", "shop.example"}, Networks: file.Networks, Pools: file.Pools, Uid: "forged"}
	h.adminApply(t, admin, api.Wrap(forged))
	stored, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.GetTenant().GetRevokedCredentials(); len(got) != 1 || got[0] != a.serial {
		t.Errorf("revoked credentials after re-apply = %v, want [%s]", got, a.serial)
	}
	if stored.GetTenant().GetUid() == "forged" || stored.GetTenant().GetUid() == "" {
		t.Errorf("uid after an apply that claims one = %q, want the cluster's", stored.GetTenant().GetUid())
	}
	if err := h.hello(t, a); err == nil {
		t.Fatal("revoked credential works again after the tenant was re-applied")
	}
	if err := h.hello(t, b); err != nil {
		t.Fatalf("the other credential refused: %v", err)
	}

	// Delete and create again: every earlier credential is refused.
	if _, err := pb.NewAdminClient(admin).Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}}); err != nil {
		t.Fatal(err)
	}
	h.adminApply(t, admin, api.Wrap(file))
	for name, cred := range map[string]issued{"revoked": a, "unrevoked": b} {
		if err := h.hello(t, cred); err == nil {
			t.Errorf("%s credential of the deleted tenant works for the new tenant acme", name)
		}
	}
	if err := h.hello(t, h.issue(t, admin, "acme")); err != nil {
		t.Fatalf("credential of the new tenant refused: %v", err)
	}
}
