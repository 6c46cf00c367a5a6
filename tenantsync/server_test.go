package tenantsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

func TestStreamScopesAndValidates(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	acme := h.open(t, "acme")
	if len(acme.welcome.GetObjects()) != 0 || acme.welcome.GetTenant().GetName() != "acme" {
		t.Fatalf("welcome = %v", acme.welcome)
	}
	pool := &pb.VIPRequest{Pool: "public"}
	good := tcpLB("svc-shop-web", pool, "10.20.0.11:30080", "10.20.0.12:30080")
	good.Tenant = "beta" // the cluster sets the tenant to the caller's
	ack := acme.change(upsert(good, tcpLB("svc-shop-bad", pool, "10.99.0.1:80"), tcpLB("shop", pool, "10.20.0.1:80")))
	web := result(t, ack, "svc-shop-web")
	if web.GetError() != "" || web.GetAddress() == "" || web.GetVersion() != syncspec.Version(good) {
		t.Errorf("svc-shop-web: %v, want an address and version %s", web, syncspec.Version(good))
	}
	if e := result(t, ack, "svc-shop-bad").GetError(); !strings.Contains(e, "outside the tenant's networks") {
		t.Errorf("svc-shop-bad error = %q, want it outside the networks", e)
	}
	if e := result(t, ack, "shop").GetError(); !strings.Contains(e, "belong to the operator") {
		t.Errorf("shop error = %q, want a name the agent does not manage", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "svc-shop-web"})
	if err != nil {
		t.Fatalf("acme's load balancer is not stored: %v", err)
	}
	acmeVIP := stored.GetLoadBalancer().GetStatus().GetAddress()

	// beta sees none of acme's objects, and its writes stay its own.
	beta := h.open(t, "beta")
	if n := len(beta.welcome.GetObjects()); n != 0 {
		t.Fatalf("beta's welcome lists %d objects, want none of acme's", n)
	}
	hostPort := h.addr
	route := tcpLB("ing-x-steal", pool, "10.30.0.1:80")
	route.Listeners = []*pb.Listener{{Port: 80, Protocol: "http"}}
	route.Routes = []*pb.Route{{Host: "shop.acme.example", Path: "/", Pool: "web"}}
	ack = beta.change(upsert(
		tcpLB("svc-shop-web", pool, "10.30.0.5:80"),
		tcpLB("svc-x-vip", &pb.VIPRequest{Pool: "public", Address: acmeVIP}, "10.30.0.6:80"),
		tcpLB("svc-x-admin", pool, hostPort),
		tcpLB("svc-x-outside", pool, "10.20.0.11:30080"),
		route,
	))
	for name, want := range map[string]string{
		"svc-x-vip":     "address " + acmeVIP + " is taken",
		"svc-x-admin":   "service port of LB host",
		"svc-x-outside": "outside the tenant's networks",
		"ing-x-steal":   "not inside the tenant's domains",
	} {
		if e := result(t, ack, name).GetError(); !strings.Contains(e, want) {
			t.Errorf("beta %s: error %q, want it to say %q", name, e, want)
		}
	}
	for _, r := range ack.GetResults() {
		if strings.Contains(r.GetError(), "acme/") {
			t.Errorf("beta's refusal of %s names acme's objects: %s", r.GetName(), r.GetError())
		}
	}
	if e := result(t, ack, "svc-shop-web").GetError(); e != "" {
		t.Errorf("beta's own svc-shop-web refused: %s", e)
	}
	after, err := h.node.Get(ctx, &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "svc-shop-web"})
	if err != nil || syncspec.Version(after.GetLoadBalancer()) != syncspec.Version(good) {
		t.Errorf("acme's load balancer changed by beta's writes: %v %v", after, err)
	}

	// A tenant credential cannot call the admin API.
	_, err = pb.NewAdminClient(h.dial(t, pki.Identity{Role: pki.RoleTenant, Name: "acme"})).List(ctx, &pb.ListRequest{Kind: "tenant"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("admin List with a tenant credential: %v, want PermissionDenied", err)
	}
	// Nor can an admin credential open a tenant stream.
	s, err := pb.NewTenantSyncClient(h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "ops"})).Sync(ctx)
	if err == nil {
		_ = s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{}}})
		_, err = s.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("tenant stream with an admin credential: %v, want PermissionDenied", err)
	}
}

func TestResyncRemovesWhatTheAgentNoLongerHas(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	pool := &pb.VIPRequest{Pool: "public"}
	a, b := tcpLB("svc-ns-a", pool, "10.20.0.1:80"), tcpLB("svc-ns-b", pool, "10.20.0.2:80")
	first := h.open(t, "acme")
	first.change(upsert(a, b))
	first.cancel() // a disconnect removes nothing

	second := h.open(t, "acme")
	got := map[string]string{}
	for _, o := range second.welcome.GetObjects() {
		got[o.GetName()] = o.GetVersion()
	}
	if got["svc-ns-a"] != syncspec.Version(a) || got["svc-ns-b"] != syncspec.Version(b) {
		t.Fatalf("welcome after reconnect = %v, want both with their versions", got)
	}
	ack := second.change(&pb.SyncChange{ResyncEnd: true, Keep: []string{"svc-ns-a"}})
	if r := result(t, ack, "svc-ns-b"); !r.GetRemoved() {
		t.Errorf("svc-ns-b after the resync marker: %v, want removed", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	objs, _, err := h.node.List(ctx, api.KindLoadBalancer, "acme")
	if err != nil || len(objs) != 1 || objs[0].GetLoadBalancer().GetName() != "svc-ns-a" {
		t.Errorf("stored after resync: %v (%v), want svc-ns-a alone", objs, err)
	}
}

func TestStatusPushAndRevocation(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{Heartbeat: 200 * time.Millisecond})
	h.seed(t)
	s := h.open(t, "acme")
	s.change(upsert(tcpLB("svc-ns-a", &pb.VIPRequest{Pool: "public"}, "10.20.0.1:80")))

	// The operator deletes the load balancer: the agent hears of it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.node.Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "acme", Name: "svc-ns-a"}}, false); err != nil {
		t.Fatal(err)
	}
	heartbeats := 0
	for removed := false; !removed; {
		m, err := s.stream.Recv()
		if err != nil {
			t.Fatalf("wait for the removal: %v", err)
		}
		st := m.GetStatus()
		if len(st.GetObjects()) == 0 && st.GetTenant() == nil {
			heartbeats++
		}
		for _, o := range st.GetObjects() {
			removed = removed || (o.GetName() == "svc-ns-a" && o.GetRemoved())
		}
	}

	// Deleting the tenant ends its streams.
	if _, err := h.node.Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"}}, false); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := s.stream.Recv()
		if err != nil {
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("stream of a deleted tenant ended with %v, want PermissionDenied naming the tenant", err)
			}
			break
		}
	}
	if got := h.ts.Streams()["acme"]; got != 0 {
		t.Errorf("%d acme streams open after the tenant was deleted", got)
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel() // a host of its own, in a temporary directory on free ports
	h := startHost(t, tenantsync.Config{})
	h.seed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	creds := pb.NewTenantCredentialsClient(h.dial(t, pki.Identity{Role: pki.RoleAdmin, Name: "ops"}))
	issued, err := creds.Issue(ctx, &pb.IssueCredentialsRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(issued.GetCertPem())
	if err != nil || cert.Subject.CommonName != "tenant:acme" || tenantsync.SerialOf(cert) != issued.GetSerial() {
		t.Fatalf("issued %v (%v), want a tenant:acme certificate with serial %s", cert.Subject, err, issued.GetSerial())
	}
	if len(issued.GetServers()) == 0 || len(issued.GetCaPem()) == 0 {
		t.Errorf("issued credentials lack servers or the CA: %v", issued)
	}
	if _, err := creds.Issue(ctx, &pb.IssueCredentialsRequest{Tenant: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("Issue for a missing tenant: %v, want NotFound", err)
	}
	_, err = creds.Revoke(ctx, &pb.RevokeCredentialsRequest{Tenant: "acme", Serials: []string{issued.GetSerial()}})
	if err != nil {
		t.Fatal(err)
	}
}
