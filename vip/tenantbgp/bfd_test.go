package tenantbgp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// birdNode runs BIRD 2 in the node namespace of p as a tenant's speaker
// would: a BGP session with the host's 10.0.0.2 with BFD on (300ms × 3),
// announcing prefixes via itself. It returns BIRD's process and control
// socket.
func birdNode(t *testing.T, p nsPair, prefixes ...string) (*os.Process, string) {
	t.Helper()
	bin, err := exec.LookPath("bird")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: needs BIRD 2 (the bird2 package)")
		}
		t.Skip("needs BIRD 2 (the bird2 package)")
	}
	dir := t.TempDir()
	var routes strings.Builder
	for _, s := range prefixes {
		fmt.Fprintf(&routes, "  route %s blackhole;\n", s)
	}
	conf := fmt.Sprintf(`router id 10.0.0.10;
protocol device {}
protocol static { ipv4;
%s}
protocol bfd { interface "*" { min rx interval 300 ms; min tx interval 300 ms; multiplier 3; }; }
protocol bgp relay {
  local 10.0.0.10 as 64600;
  neighbor 10.0.0.2 as 65001;
  bfd on;
  # BIRD holds a session down 60-300 s after a failure (its BFD's too)
  # by default; the test sees it back sooner.
  error wait time 1, 5;
  ipv4 { import none; export all; };
}
`, routes.String())
	cf, sock := filepath.Join(dir, "bird.conf"), filepath.Join(dir, "bird.ctl")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// ip netns exec execs BIRD in place: the process is BIRD's.
	cmd := exec.Command("ip", "netns", "exec", p.node, bin, "-f", "-c", cf, "-s", sock)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process, sock
}

func bfdTenant(name string, vni uint32) *pb.Object {
	o := attachedTenant(name, vni, "")
	o.GetTenant().Bgp.Bfd = &pb.TenantBGPBFD{MinTx: durationpb.New(300 * time.Millisecond), MinRx: durationpb.New(300 * time.Millisecond), Multiplier: 3}
	return o
}

func sessionOf(r *Relay, tenant string) (*pb.TenantBGPSession, error) {
	var h pb.HostObservation
	r.Observe(observe.Filter{Tenant: tenant}, &h)
	if len(h.GetTenantBgp()) != 1 || len(h.GetTenantBgp()[0].GetSessions()) != 1 {
		return nil, fmt.Errorf("observed %v", h.GetTenantBgp())
	}
	return h.GetTenantBgp()[0].GetSessions()[0], nil
}

// Two attached tenants with the same networks, each speaker BIRD with
// BFD on. Both sessions come up with BFD up (at BIRD too); when one
// BIRD stops (SIGSTOP: its TCP session stays open, so only BFD can tell)
// its routes leave its namespace within the detection time and a pass,
// well under the BGP hold time (90 s), the session shows BFD down with
// the reason; the other tenant's BFD and route stay as they were.
func TestRelayBFD(t *testing.T) {
	// In the parent process, before the tests that run in processes of
	// their own (ownProcess): its BFD detection bound does not hold
	// beside six of them on a loaded 2-core machine.
	pa, pb2 := newNSPair(t, "fa"), newNSPair(t, "fb")
	var evMu sync.Mutex
	var events []string
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa, "b": pb2}, ResetHold: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} },
		Events: func(e *pb.Event) {
			evMu.Lock()
			events = append(events, e.GetTenant()+": "+e.GetMessage())
			evMu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	birdA, sockA := birdNode(t, pa, "10.0.1.0/24")
	_, sockB := birdNode(t, pb2, "10.0.1.0/24")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{bfdTenant("a", 100), bfdTenant("b", 200)})

	want := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.0.1.0/24"): netip.MustParseAddr("10.0.0.10")}
	for name, ns := range map[string]string{"a": pa.host, "b": pb2.host} {
		waitUntil(t, name+"'s route and BFD up", func() error {
			got, err := nsRoutesOf(ns)
			if err != nil {
				return err
			}
			s, err := sessionOf(r, name)
			if err != nil {
				return err
			}
			if !maps.Equal(got, want) || s.GetState() != "established" || s.GetBfd() != "up" || s.GetBfdSince() == nil {
				return fmt.Errorf("routes %v, session %v", got, s)
			}
			return nil
		})
	}
	for _, sock := range []string{sockA, sockB} {
		out, err := exec.Command("birdc", "-s", sock, "show", "bfd", "sessions").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "10.0.0.2") || !strings.Contains(string(out), "Up") {
			t.Fatalf("BIRD's BFD sessions: %v\n%s", err, out)
		}
	}

	if err := birdA.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var took time.Duration
	for {
		got, err := nsRoutesOf(pa.host)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			took = time.Since(stopped)
			break
		}
		if time.Since(stopped) > 10*time.Second {
			t.Fatalf("a's route still installed 10s after its speaker stopped: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("a's route withdrawn %s after its speaker stopped (BFD 300ms × 3; load %s)", took, strings.TrimSpace(string(load)))
	// 900 ms of detection, the reset and a pass; a loaded machine adds
	// its scheduling. The BGP hold time is 90 s.
	if took > 1500*time.Millisecond {
		t.Errorf("a's route withdrawn %s after its speaker stopped, want under 1.5s", took)
	}
	// The observation is the one of the pass that withdrew the route,
	// which publishes it after the route left the table: it is waited
	// for, as an operator's next look would see it. BIRD is stopped, so
	// nothing brings BFD up meanwhile.
	waitUntil(t, "a's session observed with BFD down", func() error {
		s, err := sessionOf(r, "a")
		if err != nil {
			return err
		}
		if s.GetBfd() != "down" || s.GetBfdReason() != "control detection time expired" {
			return fmt.Errorf("a's session %v", s)
		}
		return nil
	})
	if n, err := testutil.GatherAndCount(registry(r), "teapot_lb_tenant_bgp_bfd_down_total"); err != nil || n != 2 {
		t.Errorf("BFD down metric: %d series, %v", n, err)
	}
	r.bfdSt.mu.Lock()
	if d := r.bfdSt.downs; d["a"] != 1 || d["b"] != 0 {
		t.Errorf("BFD downs %v, want a 1", d)
	}
	r.bfdSt.mu.Unlock()
	evMu.Lock()
	if !slices.Contains(events, "a: BFD with 10.0.0.10 went down (control detection time expired): its BGP session was reset and its routes withdrawn") {
		t.Errorf("events %q", events)
	}
	evMu.Unlock()
	// b's session, in the other namespace with the same addresses, is
	// untouched.
	sb, err := sessionOf(r, "b")
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetBfd() != "up" || sb.GetState() != "established" || sb.GetBfdSince().AsTime().After(stopped) {
		t.Errorf("b's session changed: %v", sb)
	}
	if got, err := nsRoutesOf(pb2.host); err != nil || !maps.Equal(got, want) {
		t.Errorf("b's routes %v (%v)", got, err)
	}

	// BIRD again: it makes its BFD session anew with its BGP session
	// (the new one says Down to the old), which must not reset the BGP
	// session while it opens: the session, BFD and route come back after
	// the hold (2 s here) and stay, and nothing more is counted.
	if err := birdA.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	cont := time.Now()
	waitUntil(t, "a's route and BFD back", func() error {
		got, err := nsRoutesOf(pa.host)
		if err != nil {
			return err
		}
		s, err := sessionOf(r, "a")
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) || s.GetState() != "established" || s.GetBfd() != "up" {
			return fmt.Errorf("routes %v, session %v", got, s)
		}
		return nil
	})
	t.Logf("a's route back %s after its speaker went on", time.Since(cont))
	// Longer than the hold: a reset would show.
	time.Sleep(3 * time.Second)
	if s, err := sessionOf(r, "a"); err != nil || s.GetState() != "established" || s.GetBfd() != "up" || s.GetSince().AsTime().Before(cont) {
		t.Errorf("a's session after it came back: %v (%v)", s, err)
	}
	r.bfdSt.mu.Lock()
	if d := r.bfdSt.downs["a"]; d != 1 {
		t.Errorf("a's sessions reset for BFD: %d, want 1", d)
	}
	r.bfdSt.mu.Unlock()
}

// A speaker that runs no BFD keeps its BGP session and routes: BFD that
// never came up resets nothing, and the session shows it down.
func TestRelayBFDSpeakerWithout(t *testing.T) {
	// In the parent process, before the tests that run in processes of
	// their own (ownProcess): its BFD detection bound does not hold
	// beside six of them on a loaded 2-core machine.
	pa := newNSPair(t, "fn")
	r, err := New(Config{ASN: 65001, RouterID: "127.0.0.1", Routes: &memRoutes{}, NodeID: "lb1", Attachments: pairs{"a": pa},
		HostAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.0.0.1")} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	startNodeSpeaker(t, pa, "", "10.0.1.0/24")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.Run(ctx)
	r.Update([]*pb.Object{bfdTenant("a", 100)})
	want := map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.0.1.0/24"): netip.MustParseAddr("10.0.0.10")}
	waitUntil(t, "the route", func() error {
		got, err := nsRoutesOf(pa.host)
		if err != nil {
			return err
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("routes %v", got)
		}
		return nil
	})
	// Longer than a detection time at the slow rate (3 s).
	time.Sleep(4 * time.Second)
	s, err := sessionOf(r, "a")
	if err != nil {
		t.Fatal(err)
	}
	if s.GetState() != "established" || s.GetBfd() != "down" || s.GetBfdSince() == nil || !strings.Contains(s.GetBfdReason(), "no BFD packet taken from the speaker") {
		t.Errorf("session %v", s)
	}
	if got, err := nsRoutesOf(pa.host); err != nil || !maps.Equal(got, want) {
		t.Errorf("routes %v (%v)", got, err)
	}
	r.bfdSt.mu.Lock()
	defer r.bfdSt.mu.Unlock()
	if r.bfdSt.downs["a"] != 0 {
		t.Errorf("resets %v", r.bfdSt.downs)
	}
}
