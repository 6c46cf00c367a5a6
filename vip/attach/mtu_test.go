package attach

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestCheckMTU: an attachment MTU that does not fit the underlay with
// VXLAN's headers (50 bytes over IPv4, 70 over IPv6) is refused with the
// bound and both ways out; one that fits is taken.
func TestCheckMTU(t *testing.T) {
	t.Parallel()
	if err := checkMTU(1450, "eth1", 1500, []string{"192.0.2.7"}); err != nil {
		t.Fatalf("1450 over a 1500 underlay: %v", err)
	}
	err := checkMTU(1450, "eth1", 1460, []string{"192.0.2.7"})
	if err == nil || !strings.Contains(err.Error(), "at most 1410") || !strings.Contains(err.Error(), "raise eth1's MTU to at least 1500") {
		t.Fatalf("1450 over a 1460 underlay: %v", err)
	}
	err = checkMTU(1450, "eth1", 1500, []string{"2001:db8::7"})
	if err == nil || !strings.Contains(err.Error(), "at most 1430") {
		t.Fatalf("1450 over IPv6 and a 1500 underlay: %v", err)
	}
}

// TestManagerRefusesAnMTUTheUnderlayCannotCarry: an attachment over an
// underlay of MTU 1400 whose mtu is the default 1450 fails with the
// bound (1350) in its reason, and takes an mtu that fits.
func TestManagerRefusesAnMTUTheUnderlayCannotCarry(t *testing.T) {
	t.Parallel()
	m, _ := newManager(t, "lb1")
	name := fmt.Sprintf("mtu%d", os.Getpid())
	dev := fmt.Sprintf("tpmtu%d", os.Getpid()%100000)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev, MTU: 1400}, PeerName: dev + "p"}); err != nil {
		t.Fatalf("add veth underlay: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(dev); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	obj := tenant(name, vniOf(t), 0, "lb1")
	obj.GetTenant().Attachment.Vxlan.Underlay = dev
	m.Update([]*pb.Object{obj})
	obs := m.Observe(name)
	if len(obs) != 1 || obs[0].State != StateFailed || !strings.Contains(obs[0].Reason, "set attachment.mtu to at most 1350") {
		t.Fatalf("observed %+v, want failed naming the bound 1350", obs)
	}
	obj.GetTenant().Attachment.Mtu = 1350
	m.Update([]*pb.Object{obj})
	if obs := m.Observe(name); len(obs) != 1 || obs[0].State != StateUp {
		t.Fatalf("observed %+v with attachment.mtu 1350, want up", obs)
	}
}
