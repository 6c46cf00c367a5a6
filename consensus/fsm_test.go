package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func entry(t *testing.T, idx uint64, version uint32, txns ...*pb.Txn) *raft.Log {
	t.Helper()
	data, err := proto.Marshal(&pb.Command{Version: version, Stamped: timestamppb.Now(), Txns: txns})
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: idx, Type: raft.LogCommand, Data: data}
}

func puts(objs ...*pb.Object) *pb.Txn {
	txn := &pb.Txn{}
	for _, o := range objs {
		if l := o.GetLoadBalancer(); l != nil && l.Status == nil {
			l.Status = &pb.LoadBalancerStatus{Address: "192.0.2.1"}
		}
		txn.Ops = append(txn.Ops, &pb.Op{Op: &pb.Op_Put{Put: o}})
	}
	return txn
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

// TestFSMApply: Apply checks only what an entry must find at apply time
// (existence, locks) and commits each transaction all or nothing.
func TestFSMApply(t *testing.T) {
	tests := []struct {
		name    string
		txns    []*pb.Txn
		wantErr []string // per txn; "" = committed
		wantRev uint64
	}{
		{"one txn", []*pb.Txn{puts(pool("public", "192.0.2.0/28"))}, []string{""}, 1},
		{"pool tenant lb in one txn", []*pb.Txn{puts(pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "shop", "public"))}, []string{""}, 1},
		{"second txn sees first", []*pb.Txn{puts(pool("public", "192.0.2.0/28")), {Ops: []*pb.Op{{Op: &pb.Op_Put{Put: pool("public", "192.0.2.0/27")}, MustExist: true}}}}, []string{"", ""}, 1},
		{"delete missing", []*pb.Txn{{Ops: []*pb.Op{{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindTenant, Name: "x"}}}}}}, []string{"not found"}, 0},
		{"update missing", []*pb.Txn{{Ops: []*pb.Op{{Op: &pb.Op_Put{Put: pool("a", "192.0.2.0/28")}, MustExist: true}}}}, []string{"not found"}, 0},
		{"create existing", []*pb.Txn{puts(pool("a", "192.0.2.0/28")), {Ops: []*pb.Op{{Op: &pb.Op_Put{Put: pool("a", "192.0.2.0/28")}, MustNotExist: true}}}}, []string{"", "already exists"}, 1},
		{"rejected txn, other commits", []*pb.Txn{
			{Ops: []*pb.Op{{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindVIPPool, Name: "gone"}}}}},
			puts(pool("public", "192.0.2.0/28")),
		}, []string{"not found", ""}, 1},
		{"empty txn", []*pb.Txn{{}}, []string{"empty"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFSM(testLogger())
			res := f.Apply(entry(t, 1, commandVersion, tt.txns...)).(*applyResult)
			for i, want := range tt.wantErr {
				got := res.errs[i]
				if want == "" && got != nil {
					t.Errorf("txn %d: unexpected error %v", i, got)
				}
				if want != "" && (got == nil || !strings.Contains(got.Error(), want)) {
					t.Errorf("txn %d: error %v, want one containing %q", i, got, want)
				}
			}
			if f.st.revision != tt.wantRev {
				t.Errorf("revision %d, want %d", f.st.revision, tt.wantRev)
			}
		})
	}
}

// TestFSMApplyRunsNoRules: entries that today's rules refuse (as an older
// or newer release's rules might accept them) are applied as the log says,
// while the proposer's check refuses each of them. A rule change therefore
// never changes what a log means.
func TestFSMApplyRunsNoRules(t *testing.T) {
	tests := []struct {
		name string
		txns []*pb.Txn
		want string // the proposer's refusal of the last txn
	}{
		{"tenant naming a missing pool", []*pb.Txn{puts(tenant("acme", "missing"))}, "missing"},
		{"bad cidr", []*pb.Txn{puts(pool("bad", "300.0.0.0/8"))}, "300.0.0.0/8"},
		{"overlapping pools", []*pb.Txn{puts(pool("a", "192.0.2.0/28")), puts(pool("b", "192.0.2.8/29"))}, "overlap"},
		{"address allocated twice", []*pb.Txn{
			puts(pool("public", "192.0.2.0/28"), tenant("acme", "public"), lb("acme", "one", "public")),
			puts(lb("acme", "two", "public")),
		}, "in use"},
		{"delete of a pool in use", []*pb.Txn{
			puts(pool("public", "192.0.2.0/28"), tenant("acme", "public")),
			{Ops: []*pb.Op{{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindVIPPool, Name: "public"}}}}},
		}, "acme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The proposer: earlier txns are the state, the last one is refused.
			f := newFSM(testLogger())
			last := len(tt.txns) - 1
			if last > 0 {
				if res := f.Apply(entry(t, 1, commandVersion, tt.txns[:last]...)).(*applyResult); slices.ContainsFunc(res.errs, func(e error) bool { return e != nil }) {
					t.Fatalf("setup: %v", res.errs)
				}
			}
			if err := checkTxn(newOverlay(f.st), tt.txns[last], time.Now()); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("proposer's check: %v, want an error containing %q", err, tt.want)
			}
			// Apply: the same entry commits.
			before := f.st.revision
			res := f.Apply(entry(t, 2, commandVersion, tt.txns[last])).(*applyResult)
			if res.errs[0] != nil {
				t.Fatalf("Apply ran a rule: %v", res.errs[0])
			}
			if f.st.revision != before+1 {
				t.Fatalf("revision %d, want %d", f.st.revision, before+1)
			}
		})
	}
}

func TestFSMRefusesUnknownVersion(t *testing.T) {
	f := newFSM(testLogger())
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "command version 99") {
			t.Fatalf("want a panic naming the version, got %v", r)
		}
	}()
	f.Apply(entry(t, 7, 99, puts(pool("a", "192.0.2.0/28"))))
}

func TestFSMRefusesGarbage(t *testing.T) {
	f := newFSM(testLogger())
	defer func() {
		if recover() == nil {
			t.Fatal("want a panic for an undecodable entry")
		}
	}()
	f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}})
}

func TestFSMSnapshotRestoreRoundTrip(t *testing.T) {
	f := newFSM(testLogger())
	f.Apply(entry(t, 1, commandVersion, puts(pool("public", "192.0.2.0/28", "2001:db8::/120"), tenant("acme", "public"))))
	for i := 0; i < 5; i++ {
		o := lb("acme", fmt.Sprintf("lb%d", i), "public")
		o.GetLoadBalancer().Status = &pb.LoadBalancerStatus{Address: fmt.Sprintf("192.0.2.%d", i+1)}
		f.Apply(entry(t, uint64(i+2), commandVersion, puts(o)))
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := newFSM(testLogger())
	if err := g.Restore(ioNopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.st.toProto(), g.st.toProto()) {
		t.Fatal("restored state differs")
	}
	if g.st.revision != 6 {
		t.Fatalf("revision %d, want 6", g.st.revision)
	}
	// Reads wait for the FSM's own applied index, which the snapshot keeps.
	if got, want := g.applied.Load(), f.applied.Load(); got != want || want != 6 {
		t.Fatalf("applied index after restore %d, want %d (= 6)", got, want)
	}
	if users := g.st.addressUsers(mustAddr("192.0.2.3")); len(users) != 1 {
		t.Fatalf("address index not rebuilt: %v", users)
	}
	// The proposer's check sees the restored state.
	if err := checkTxn(newOverlay(g.st), puts(lbAt("acme", "dup", "public", "192.0.2.3")), time.Now()); err == nil {
		t.Fatal("address held before the snapshot was allocated twice")
	}
	if err := g.Restore(ioNopCloser(bytes.NewReader([]byte("not a snapshot")))); err == nil {
		t.Fatal("garbage snapshot accepted")
	}
}

func TestFSMRejectedTxnLeavesStateUnchanged(t *testing.T) {
	f := newFSM(testLogger())
	f.Apply(entry(t, 1, commandVersion, puts(pool("public", "192.0.2.0/28"), tenant("acme", "public"))))
	before := f.st.toProto()
	// The first op would commit; the second finds the tenant it must not.
	txn := &pb.Txn{Ops: []*pb.Op{
		{Op: &pb.Op_Put{Put: pool("other", "198.51.100.0/24")}},
		{Op: &pb.Op_Put{Put: tenant("acme", "public", "other")}, MustNotExist: true},
	}}
	res := f.Apply(entry(t, 2, commandVersion, txn)).(*applyResult)
	if !errors.Is(res.errs[0], api.ErrExists) {
		t.Fatalf("want ErrExists, got %v", res.errs[0])
	}
	if !proto.Equal(before, f.st.toProto()) {
		t.Fatal("a rejected transaction changed the state (all or nothing)")
	}
	// And the proposer refuses an invalid object with a validation error.
	bad := tenant("acme", "public")
	bad.GetTenant().Networks = []string{"not-a-cidr"}
	var ve *api.ValidationError
	if err := checkTxn(newOverlay(f.st), puts(bad), time.Now()); !errors.As(err, &ve) {
		t.Fatalf("want a validation error from the proposer, got %v", err)
	}
}

func lbAt(ten, name, pl, addr string) *pb.Object {
	o := lb(ten, name, pl)
	o.GetLoadBalancer().Status = &pb.LoadBalancerStatus{Address: addr}
	return o
}

// TestSnapshotSortsOutsideTheStateMachine: after a write of many load
// balancers (which drops the kind's sorted list), taking a snapshot does
// not sort them while it holds the state machine; Persist does, and writes
// the same bytes as the sorted state, whatever writes come in between.
func TestSnapshotSortsOutsideTheStateMachine(t *testing.T) {
	f := newFSM(testLogger())
	f.Apply(entry(t, 1, commandVersion, puts(pool("public", "192.0.2.0/24"), tenant("acme", "public"))))
	var objs []*pb.Object
	for i := range 200 {
		o := lb("acme", fmt.Sprintf("lb%03d", (i*37)%200), "public")
		o.GetLoadBalancer().Status = &pb.LoadBalancerStatus{Address: fmt.Sprintf("192.0.2.%d", i%250+1)}
		objs = append(objs, o)
	}
	f.Apply(entry(t, 2, commandVersion, puts(objs...)))
	f.st.sortedMu.Lock()
	_, kept := f.st.sorted[api.KindLoadBalancer]
	f.st.sortedMu.Unlock()
	if kept {
		t.Fatal("a write of 200 load balancers kept their sorted list; the test needs it dropped")
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(func() *pb.State {
		p := f.st.toProto()
		p.AppliedIndex = 2
		return p
	}())
	if err != nil {
		t.Fatal(err)
	}
	f.st.dropSorted(api.KindLoadBalancer) // toProto sorted them

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.st.sortedMu.Lock()
	_, kept = f.st.sorted[api.KindLoadBalancer]
	f.st.sortedMu.Unlock()
	if kept {
		t.Error("taking the snapshot sorted the load balancers while it held the state machine")
	}
	// A write after the snapshot is not in it.
	f.Apply(entry(t, 3, commandVersion, puts(lb("acme", "later", "public"))))
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if got := sink.Bytes()[len(snapshotMagic):]; !bytes.Equal(got, want) {
		t.Fatalf("the snapshot's encoding (%d bytes) differs from the sorted state's (%d bytes)", len(got), len(want))
	}
}
