package consensus

import (
	"context"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// observedHosts forms a three-host cluster whose hosts each report one
// listener named after them, as serve wires the data plane.
func observedHosts(t *testing.T) []*testHost {
	t.Helper()
	cfgFor := func(id string) Config {
		h := observe.NewHost(id)
		h.Add(observe.SourceFunc(func(f observe.Filter, o *pb.HostObservation) {
			if f.MatchLB("acme/web") {
				o.Listeners = append(o.Listeners, &pb.ListenerObservation{LoadBalancer: "acme/web", Address: "192.0.2.1:80", Bound: id != "n2", Error: map[bool]string{true: "address already in use"}[id == "n2"]})
			}
		}))
		return Config{NodeID: id, Observe: h.Observe, Event: h.Events().Add}
	}
	h1 := startHost(t, cfgFor("n1"))
	hosts := []*testHost{h1}
	for _, id := range []string{"n2", "n3"} {
		tok, err := h1.node.CreateJoinToken(ctxT(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cfgFor(id)
		cfg.Join, cfg.Token = h1.cfg.APIAddr, tok.Token
		hosts = append(hosts, startHost(t, cfg))
	}
	waitFor(t, "3 voters", func() bool { return h1.node.voters() == 3 })
	return hosts
}

func TestObserveFansInFromEveryHost(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := observedHosts(t)
	n1 := hosts[0].node

	// Each host records the leader it learns on a goroutine of its own
	// (watchLeader), which the joins and promotions that make the three
	// voters do not wait for: the fan-in is asked until every host has
	// the event.
	var resp *pb.ObserveResponse
	waited := false
	defer func() {
		// waitFor's Fatalf runs this: what the last fan-in got.
		if !waited {
			t.Logf("observed %v", resp.GetHosts())
		}
	}()
	waitFor(t, "every host's leader-change event", func() bool {
		var err error
		resp, err = n1.Observe(ctxT(t), &pb.ObserveRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range resp.Hosts {
			leader := false
			for _, ev := range h.Events {
				leader = leader || ev.Type == observe.EventLeaderChange
			}
			if !leader {
				return false
			}
		}
		return true
	})
	waited = true
	if len(resp.Hosts) != 3 {
		t.Fatalf("observed %d hosts, want 3", len(resp.Hosts))
	}
	for _, h := range resp.Hosts {
		if !h.Reachable || h.Error != "" {
			t.Errorf("host %s: reachable %v, error %q", h.NodeId, h.Reachable, h.Error)
		}
		if len(h.Listeners) != 1 {
			t.Fatalf("host %s: %d listeners, want 1", h.NodeId, len(h.Listeners))
		}
		if bound := h.Listeners[0].Bound; bound != (h.NodeId != "n2") {
			t.Errorf("host %s: bound %v (each host must report its own view)", h.NodeId, bound)
		}
		// Every host saw the first leader being elected or learned of it.
		var leader bool
		for _, ev := range h.Events {
			leader = leader || ev.Type == observe.EventLeaderChange
		}
		if !leader || h.LastEvent == 0 {
			t.Errorf("host %s: no leader-change event (events %v, last %d)", h.NodeId, h.Events, h.LastEvent)
		}
	}

	// A filter on another load balancer drops the listeners; one host.
	one, err := n1.Observe(ctxT(t), &pb.ObserveRequest{Node: "n2", LoadBalancer: "acme/other", EventsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Hosts) != 1 || one.Hosts[0].NodeId != "n2" || len(one.Hosts[0].Listeners) != 0 {
		t.Fatalf("node filter: %v", one.Hosts)
	}

	// A host that is down is reported unreachable, within the per-host
	// timeout, while the others still answer.
	hosts[2].stop()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err = n1.Observe(ctx, &pb.ObserveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > ObserveTimeout+5*time.Second {
		t.Errorf("Observe with a host down took %s", took)
	}
	for _, h := range resp.Hosts {
		down := h.NodeId == "n3"
		if h.Reachable == down || (down && h.Error == "") {
			t.Errorf("host %s: reachable %v error %q", h.NodeId, h.Reachable, h.Error)
		}
	}
}
