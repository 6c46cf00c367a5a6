package consensus

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The golden log: a Raft log and snapshot written by a real cluster of the
// release that made them, and the state they replay to. Every release must
// replay every golden directory to its state.pb: an equal message, and the
// same bytes.
var (
	writeGolden = flag.Bool("golden.write", false, "write a golden log (TestGenerateGolden) from a live three-host cluster")
	goldenOut   = flag.String("golden.out", "testdata/golden/v1", "directory TestGenerateGolden writes; it must hold objects.yaml")
)

// goldenDirs are the golden logs every release replays.
var goldenDirs = []string{"testdata/golden/v1"}

func TestGoldenLogReplay(t *testing.T) {
	for _, dir := range goldenDirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, "state.pb"))
			if err != nil {
				t.Fatalf("golden state: %v", err)
			}
			var wantState pb.State
			if err := proto.Unmarshal(want, &wantState); err != nil {
				t.Fatalf("golden state: %v", err)
			}
			// The snapshot and the entries after it, as a restarting host
			// replays them; and the whole log from its first entry, as a
			// host that never took the snapshot does.
			for _, fromSnapshot := range []bool{true, false} {
				// Two checks. proto.Equal: the replayed state is the
				// golden one, field by field; this is what keeps hosts of
				// different releases agreeing. Bytes: the deterministic
				// encoding equals the committed state.pb, as the golden
				// log promises. Deterministic marshalling is not stable
				// across protobuf-go versions, so a byte difference with
				// equal messages means the encoder changed, not the state
				// machine: then add a new golden directory beside this one
				// with that reason (never rewrite this one).
				f, stats := replayGolden(t, dir, fromSnapshot)
				if got := replayedState(f); !proto.Equal(got, &wantState) {
					diffStates(t, &wantState, got)
					t.Fatalf("replay (snapshot %v) of %s gives a state that differs from state.pb", fromSnapshot, dir)
				}
				if got := encodeState(t, f); !bytes.Equal(got, want) {
					t.Fatalf("replay (snapshot %v) of %s gives the golden state, but its encoding (%d bytes) differs from state.pb (%d bytes): "+
						"the protobuf encoder changed; add a new golden directory beside %s with that reason", fromSnapshot, dir, len(got), len(want), dir)
				}
				t.Logf("snapshot %v: replayed %d commands (%d refused at apply time) to revision %d",
					fromSnapshot, stats.commands, stats.refused, f.st.revision)
				if fromSnapshot && stats.commands == 0 {
					t.Fatal("no log entries after the snapshot: the golden log would only test the snapshot")
				}
				if !fromSnapshot && stats.refused == 0 {
					t.Fatal("the golden log holds no transaction refused at apply time")
				}
			}
			checkGoldenCoverage(t, &wantState)
		})
	}
}

type replayStats struct{ commands, refused int }

// replayGolden applies a golden directory's snapshot (when fromSnapshot)
// and log to a new FSM. The files are copied first: bbolt opens its file
// for writing.
func replayGolden(t *testing.T, dir string, fromSnapshot bool) (*fsm, replayStats) {
	t.Helper()
	tmp := t.TempDir()
	copyTree(t, dir, tmp)
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(tmp, "raft.db")})
	if err != nil {
		t.Fatalf("open golden log: %v", err)
	}
	defer store.Close()
	f := newFSM(testLogger())
	first, err := store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if fromSnapshot {
		snaps, err := raft.NewFileSnapshotStore(tmp, 1, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		metas, err := snaps.List()
		if err != nil || len(metas) == 0 {
			t.Fatalf("golden snapshot: %v (%d found)", err, len(metas))
		}
		meta, rc, err := snaps.Open(metas[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Restore(rc); err != nil {
			t.Fatalf("restore golden snapshot: %v", err)
		}
		first = meta.Index + 1
	} else if first != 1 {
		t.Fatalf("golden log starts at %d, want 1", first)
	}
	var stats replayStats
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			t.Fatalf("log entry %d: %v", i, err)
		}
		res, _ := f.Apply(&l).(*applyResult)
		if res == nil {
			continue
		}
		stats.commands++
		for _, e := range res.errs {
			if e != nil {
				stats.refused++
			}
		}
	}
	return f, stats
}

// replayedState is f's state with the index it has applied, as state.pb
// holds it.
func replayedState(f *fsm) *pb.State {
	p := f.st.toProto()
	p.AppliedIndex = f.applied.Load()
	return p
}

func encodeState(t *testing.T, f *fsm) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(replayedState(f))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// diffStates names the objects that differ.
func diffStates(t *testing.T, want, got *pb.State) {
	t.Helper()
	index := func(s *pb.State) map[string]proto.Message {
		m := map[string]proto.Message{}
		for _, o := range stateFromProto(s).all() {
			m[api.RefString(api.RefOf(o))] = o
		}
		return m
	}
	w, g := index(want), index(got)
	for k, wo := range w {
		if gob, ok := g[k]; !ok {
			t.Errorf("missing after replay: %s", k)
		} else if !proto.Equal(wo, gob) {
			t.Errorf("differs: %s\nwant %s\n got %s", k, prototext.Format(wo), prototext.Format(gob))
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("extra after replay: %s", k)
		}
	}
	if want.GetRevision() != got.GetRevision() || want.GetAppliedIndex() != got.GetAppliedIndex() {
		t.Errorf("revision %d applied %d, want %d and %d", got.GetRevision(), got.GetAppliedIndex(), want.GetRevision(), want.GetAppliedIndex())
	}
}

// checkGoldenCoverage: the golden state holds every kind the state knows.
func checkGoldenCoverage(t *testing.T, s *pb.State) {
	t.Helper()
	st := stateFromProto(s)
	for _, k := range allKinds {
		if len(st.list(k, "")) == 0 {
			t.Errorf("the golden state has no %s object", k)
		}
	}
	revoked := false
	for _, tn := range s.GetTenants() {
		revoked = revoked || len(tn.GetRevokedCredentials()) > 0
	}
	if !revoked {
		t.Error("the golden state has no revoked credential")
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGenerateGolden writes a golden directory (-golden.out) from a live
// three-host cluster when run with -golden.write. Run it only to add a new golden
// directory on purpose (see DESIGN.md, "The golden log").
func TestGenerateGolden(t *testing.T) {
	if !*writeGolden {
		t.Skip("regenerates the golden log only with -golden.write")
	}
	out := *goldenOut
	hosts := threeHosts(t)
	n1 := hosts[0].node
	ctx := ctxT(t)

	data, err := os.ReadFile(filepath.Join(out, "objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(bytes.NewReader(data), "objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The load balancer naming the uploaded certificate comes after it.
	var first, withCert []*pb.Object
	for _, o := range objs {
		if len(o.GetLoadBalancer().GetListeners()) > 0 && len(o.GetLoadBalancer().GetListeners()[0].GetTls().GetCertificates()) > 0 {
			withCert = append(withCert, o)
		} else {
			first = append(first, o)
		}
	}
	apply(t, hosts[1].node, first...) // through a follower: forwarded
	certPEM, keyPEM := selfSigned(t, "www.globex.example")
	cert := &pb.Certificate{Name: "globex-web", Tenant: "globex", Hosts: []string{"www.globex.example"}, Source: "uploaded",
		Issuer: "CN=www.globex.example", NotAfter: timestamppb.New(time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)), State: "ready"}
	if _, err := n1.PutCertificate(ctx, cert, "uploaded/globex/globex-web", append(certPEM, keyPEM...)); err != nil {
		t.Fatal(err)
	}
	apply(t, n1, withCert...)
	// An update (generation 2), a deletion.
	var shop *pb.Object
	for _, o := range objs {
		if o.GetLoadBalancer().GetName() == "shop" {
			shop = clone(o)
		}
	}
	shop.GetLoadBalancer().GetPools()["web"].Members = append(shop.GetLoadBalancer().GetPools()["web"].Members, &pb.Member{Address: "10.20.0.13:30080"})
	apply(t, n1, shop)
	if _, err := n1.Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: "hooli", Name: "tmp"}}, false); err != nil {
		t.Fatal(err)
	}
	if err := n1.r().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	// After the snapshot: the certificate store, locks, a revocation, a
	// drain, a join token, and an entry with a transaction refused at
	// apply time.
	for _, k := range []string{"acme/account.json", "certificates/acme/shop.acme.example.crt", "certificates/acme/shop.acme.example.key", "ocsp/shop"} {
		if err := hosts[2].node.StoragePut(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n1.StorageLock(ctx, "issue_cert_shop.acme.example", "n1-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := n1.StorageLock(ctx, "issue_cert_shop.acme.example", "n1-a", 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := n1.StorageLock(ctx, "issue_cert_gone", "n2-b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := n1.StorageUnlock(ctx, "issue_cert_gone", "n2-b"); err != nil {
		t.Fatal(err)
	}
	if err := n1.StorageDelete(ctx, "ocsp"); err != nil {
		t.Fatal(err)
	}
	ten, err := n1.Get(ctx, &pb.ObjectRef{Kind: api.KindTenant, Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	revoke := clone(ten)
	revoke.GetTenant().Meta = nil
	revoke.GetTenant().RevokedCredentials = []string{"1f2e3d4c5b6a"}
	if _, err := n1.Apply(ctx, &pb.ApplyRequest{Objects: []*pb.Object{revoke}, Mode: pb.ApplyMode_APPLY_MODE_UPDATE}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.DrainNode(ctx, "n3", true); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.CreateJoinToken(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	late := pool("late", "198.51.100.128/28")
	stamp(late, nil, time.Now())
	proposeRaw(t, n1, &pb.Txn{Ops: []*pb.Op{{Op: &pb.Op_Delete{Delete: &pb.ObjectRef{Kind: api.KindVIPPool, Name: "never"}}}}},
		&pb.Txn{Ops: []*pb.Op{{Op: &pb.Op_Put{Put: late}, MustNotExist: true}}})

	for _, h := range hosts[1:] {
		h.stop()
	}
	hosts[0].stop()
	if err := os.RemoveAll(filepath.Join(out, "snapshots")); err != nil {
		t.Fatal(err)
	}
	copyTree(t, filepath.Join(hosts[0].cfg.DataDir, "raft"), out)
	state := encodeState(t, n1.fsm)
	if err := os.WriteFile(filepath.Join(out, "state.pb"), state, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: revision %d, applied index %d", out, n1.fsm.st.revision, n1.fsm.applied.Load())
}

// proposeRaw appends one command as the leader's write loop would, without
// its checks, so that the log holds a transaction refused at apply time
// (two leaders racing across a term change write such entries).
func proposeRaw(t *testing.T, n *Node, txns ...*pb.Txn) {
	t.Helper()
	data, err := proto.Marshal(&pb.Command{Version: commandVersion, Stamped: timestamppb.Now(), Txns: txns})
	if err != nil {
		t.Fatal(err)
	}
	f := n.r().Apply(data, 10*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	res := f.Response().(*applyResult)
	if res.errs[0] == nil || res.errs[1] != nil {
		t.Fatalf("want the first transaction refused and the second committed, got %v", res.errs)
	}
}

func selfSigned(t *testing.T, host string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}
