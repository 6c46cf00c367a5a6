package api

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api/catalogtest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateTenantBFD(t *testing.T) {
	t.Parallel()
	ms := func(n int) *durationpb.Duration { return durationpb.New(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name     string
		attached bool
		bfd      *pb.TenantBGPBFD
		want     expect
	}{
		{"defaults", true, &pb.TenantBGPBFD{}, pass()},
		{"set", true, &pb.TenantBGPBFD{MinTx: ms(100), MinRx: ms(250), Multiplier: 5}, pass()},
		{"no attachment", false, &pb.TenantBGPBFD{}, bad("bgp.bfd", "needs attachment: a tenant's BFD runs from inside its namespace")},
		{"min tx under the floor", true, &pb.TenantBGPBFD{MinTx: ms(50)}, bad("bgp.bfd.minTx", "50ms is shorter than 100ms: every host sends or reads a packet per speaker each interval")},
		{"min rx under the floor", true, &pb.TenantBGPBFD{MinRx: ms(10)}, bad("bgp.bfd.minRx", "10ms is shorter than 100ms")},
		{"min rx too long", true, &pb.TenantBGPBFD{MinRx: durationpb.New(2 * time.Minute)}, bad("bgp.bfd.minRx", "2m0s is longer than 1m0s")},
		{"negative", true, &pb.TenantBGPBFD{MinTx: ms(-300)}, bad("bgp.bfd.minTx", "must be a positive duration")},
		{"not whole microseconds", true, &pb.TenantBGPBFD{MinTx: durationpb.New(time.Second + 1)}, bad("bgp.bfd.minTx", "not a whole number of microseconds")},
		{"multiplier 1", true, &pb.TenantBGPBFD{Multiplier: 1}, bad("bgp.bfd.multiplier", "1: use 2 to 255")},
		{"multiplier 256", true, &pb.TenantBGPBFD{Multiplier: 256}, bad("bgp.bfd.multiplier", "256: use 2 to 255")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := attached("a", 100)
			if !tt.attached {
				a.Attachment = nil
			}
			a.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9"}, Bfd: tt.bfd}
			check(t, ValidateTenant(a, catalogtest.New(publicPool())), tt.want)
		})
	}
}

func TestTenantBFDDefaults(t *testing.T) {
	t.Parallel()
	if _, _, _, ok := TenantBFD(&pb.TenantBGP{}); ok {
		t.Fatal("bfd without bgp.bfd")
	}
	tx, rx, m, ok := TenantBFD(&pb.TenantBGP{Bfd: &pb.TenantBGPBFD{MinRx: durationpb.New(time.Second)}})
	if !ok || tx != 300*time.Millisecond || rx != time.Second || m != 3 {
		t.Fatalf("%s %s %d %v", tx, rx, m, ok)
	}
}

// bgp.bfd needs feature level 7: a host of an earlier release would keep
// a silent speaker's routes for the hold time.
func TestTenantBFDFeatureLevel(t *testing.T) {
	t.Parallel()
	tn := attached("a", 100)
	tn.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9"}, Bfd: &pb.TenantBGPBFD{}}
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_Tenant{Tenant: tn}})
	found := false
	for _, u := range uses {
		if u.Feature == FeatureTenantBFD && u.Field == "Tenant a: bgp.bfd" {
			found = true
		}
	}
	if !found || LevelNeeded(uses) != 7 {
		t.Fatalf("FeaturesUsed %v (level %d); want bgp.bfd at level 7", uses, LevelNeeded(uses))
	}
}

// BFD is single hop: a speaker off a host's prefix (behind
// attachment.gateway) is refused with bgp.bfd, and accepted without it.
func TestValidateTenantBFDPeerOnSegment(t *testing.T) {
	t.Parallel()
	a := attached("a", 100)
	a.Attachment.Hosts["lb1"] = "10.0.0.2/28"
	a.Attachment.Gateway = "10.0.0.1"
	a.Bgp = &pb.TenantBGP{Asn: 65001, Peers: []string{"10.0.0.9", "10.0.0.99"}}
	check(t, ValidateTenant(a, catalogtest.New(publicPool())), pass())
	a.Bgp.Bfd = &pb.TenantBGPBFD{}
	check(t, ValidateTenant(a, catalogtest.New(publicPool())), bad("bgp.bfd", "bgp.peers[1] 10.0.0.99 is not on the prefix 10.0.0.0/28 of host lb1: single-hop BFD needs the speaker on the hosts' segment"))
}
