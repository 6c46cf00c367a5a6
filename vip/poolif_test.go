package vip

import (
	"maps"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestPoolIfaceProblems(t *testing.T) {
	t.Parallel()
	d := desiredState([]*pb.Object{
		api.Wrap(&pb.VIPPool{Name: "public", Cidrs: []string{"192.0.2.0/28"}, Mode: ModeARP}),
		api.Wrap(&pb.VIPPool{Name: "private", Cidrs: []string{"10.9.0.0/28"}, Mode: ModeARP, Interface: "eth1"}),
		api.Wrap(&pb.VIPPool{Name: "same", Cidrs: []string{"10.9.1.0/28"}, Mode: ModeARP, Interface: "eth0"}),
		api.Wrap(&pb.VIPPool{Name: "down", Cidrs: []string{"10.9.2.0/28"}, Mode: ModeARP, Interface: "eth2"}),
		api.Wrap(&pb.VIPPool{Name: "gone", Cidrs: []string{"10.9.3.0/28"}, Mode: ModeARP, Interface: "eth9"}),
		api.Wrap(&pb.VIPPool{Name: "a-private", Cidrs: []string{"10.0.0.96/28"}, Mode: ModeARP, Attachment: "a"}),
		api.Wrap(&pb.VIPPool{Name: "b-private", Cidrs: []string{"10.0.1.96/28"}, Mode: ModeARP, Attachment: "b"}),
	})
	links := map[string][2]bool{"eth0": {true, true}, "eth1": {true, true}, "eth2": {true, false}}
	asked := map[string]bool{}
	got := poolIfaceProblems(&d, "eth0", func(name string) (bool, bool) {
		asked[name] = true
		l := links[name]
		return l[0], l[1]
	}, func(tenant string) string {
		if tenant == "b" {
			return "is not up on this host (no namespace teapot-att-b)"
		}
		return ""
	})
	want := map[string]string{
		"down":      "interface eth2 of pool down is down",
		"gone":      "interface eth9 of pool gone does not exist on this host",
		"b-private": "pool b-private lives in tenant b's attachment, which is not up on this host (no namespace teapot-att-b)",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	// The pools on --vip-interface are its standing's (eligible), not a
	// pool's problem.
	if asked["eth0"] {
		t.Fatal("asked about --vip-interface")
	}
	if got := d.ifaceOf("private"); got != "eth1" {
		t.Fatalf("ifaceOf private = %q", got)
	}
	if got := d.ifaceOf("public") + d.ifaceOf("nope"); got != "" {
		t.Fatalf("ifaceOf public, nope = %q", got)
	}
}

func TestReadinessOfPoolIface(t *testing.T) {
	t.Parallel()
	rd := readiness{ready: map[string]string{"acme/a": "", "acme/b": ""}, have: true,
		ifProblems: map[string]string{"private": "interface eth1 of pool private does not exist on this host"}}
	pub := vipSpec{Mode: ModeARP, Pool: "public", LBs: []string{"acme/a"}}
	priv := vipSpec{Mode: ModeARP, Pool: "private", LBs: []string{"acme/b"}}
	if why, _ := rd.why(pub); why != "" {
		t.Fatalf("public: %q", why)
	}
	if why, _ := rd.why(priv); why != "interface eth1 of pool private does not exist on this host" {
		t.Fatalf("private: %q", why)
	}
}
