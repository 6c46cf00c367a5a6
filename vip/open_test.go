package vip

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestOpenDisabled: a host with no --vip-interface and no bgp: section
// gets the disabled manager, whose every method does nothing.
func TestOpenDisabled(t *testing.T) {
	t.Parallel()
	m, err := Open(Config{NodeID: "a", RaftAddr: "not an address"})
	if err != nil || m != nil {
		t.Fatalf("Open without interface or BGP = %v, %v; want the disabled manager", m, err)
	}
	m.SetKey([]byte("k"))
	m.SetStateContact(nil)
	m.SetHandover(nil)
	m.Update(nil, 1)
	m.NoteRevision(2)
	m.Follow(true, nil, nil, 3, nil)
	m.Follow(false, nil, func(func(*pb.Object, *pb.Object) bool) {}, 4, nil)
	m.HandOverClients(context.Background())
	var ns pb.NodeStatus
	m.Describe(&ns)
	if ns.GetHeartbeatInterval() != "" || len(ns.GetVips()) != 0 {
		t.Errorf("Describe added %v", &ns)
	}
	if m.HeartbeatAddr() != "" {
		t.Errorf("HeartbeatAddr = %q, want none", m.HeartbeatAddr())
	}
	if err := m.Run(context.Background()); err != nil {
		t.Errorf("Run = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	descs := make(chan *prometheus.Desc, 16)
	m.Collector().Describe(descs)
	if len(descs) == 0 {
		t.Errorf("the disabled manager's collector describes no metric (the dashboard check reads them)")
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m.Collector()); err != nil {
		t.Fatal(err)
	}
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("the disabled manager exports %d families (%v)", len(fams), err)
	}
}

// TestOpenHeartbeatDefault: the heartbeat address defaults to the Raft
// IP, so a Raft address that is not IP:port is refused, naming it.
func TestOpenHeartbeatDefault(t *testing.T) {
	t.Parallel()
	_, err := Open(Config{NodeID: "a", Interface: "lo", RaftAddr: "raft.example:7300"})
	if err == nil || !strings.Contains(err.Error(), `--raft-addr "raft.example:7300"`) {
		t.Errorf("Open = %v, want a refusal of --raft-addr", err)
	}
	if errors.Is(err, ErrPermission) {
		t.Errorf("Open checked capabilities before the address: %v", err)
	}
}
