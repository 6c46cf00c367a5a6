package clientsource

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/teapot-lb/teapot-lb/proxy/internal/netnstest"
)

// pieces counts what is installed for a family: the marking rules of
// table TableName, routing rules for Mark, routes in RouteTable.
func pieces(t *testing.T, v6 bool) (marks, rules, routes int) {
	t.Helper()
	if out, err := exec.Command("nft", "list", "table", famName(v6), TableName).CombinedOutput(); err == nil {
		marks = strings.Count(string(out), "socket transparent 1")
	}
	rs, err := netlink.RuleList(family(v6))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Mark == Mark && r.Table == RouteTable {
			rules++
		}
	}
	rts, err := netlink.RouteListFiltered(family(v6), &netlink.Route{Table: RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	return marks, rules, len(rts)
}

// TestEnsureIsIdempotentAndCloseRemoves: in a namespace of its own, each
// family's marking rule, routing rule and local route are installed once however often
// Ensure is called, a second Host finds what a first one left (a crash)
// and installs nothing twice, and Close removes every piece.
func TestEnsureIsIdempotentAndCloseRemoves(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: nft is not installed (nftables)")
		}
		t.Skip("nft is not installed (nftables)")
	}
	netnstest.Run(t, nil, func() {
		crashed := New(Config{})
		for _, v6 := range []bool{false, true} {
			for range 2 {
				if err := crashed.Ensure(v6); err != nil {
					t.Errorf("Ensure(v6 %v): %v", v6, err)
					return
				}
			}
		}
		h := New(Config{})
		for _, v6 := range []bool{false, true} {
			if err := h.Ensure(v6); err != nil {
				t.Errorf("Ensure(v6 %v) over what another left: %v", v6, err)
				return
			}
			if tb, ru, rt := pieces(t, v6); tb != 1 || ru != 1 || rt != 1 {
				t.Errorf("v6 %v: %d marking rules, %d routing rules, %d routes; want one each", v6, tb, ru, rt)
			}
		}
		if err := h.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, v6 := range []bool{false, true} {
			if tb, ru, rt := pieces(t, v6); tb+ru+rt != 0 {
				t.Errorf("v6 %v after Close: %d marking rules, %d routing rules, %d routes", v6, tb, ru, rt)
			}
		}
		if err := h.Ensure(false); err == nil {
			t.Error("Ensure after Close succeeded")
		}
	})
}
