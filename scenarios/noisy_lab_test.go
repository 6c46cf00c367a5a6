package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// The noisy-neighbour lab: one LB host on loopback, tenant a's load
// balancer with two real backends, and tenant b, which abuses what a tenant
// can write and use. Addresses are loopback ranges the operator gives the
// tenants on purpose.
const (
	noisyPool     = "127.0.100.0/28"
	noisyVIPA     = "127.0.100.1" // a/shop
	noisyVIPB     = "127.0.100.2" // b/front
	noisyVIPLoop  = "127.0.100.3" // what b asks for its self-dialling load balancer
	noisyNetA     = "127.0.50.0/24"
	noisyNetB     = "127.0.51.0/24"
	noisyHostA    = "shop.a.example"
	noisyHostB    = "shop.b.example"
	noisyHTTPPort = 8080
	noisyTLSPort  = 8443
	noisyTCPPort  = 9000
	// Descriptor limits: the LB host gets fewer descriptors than b opens
	// idle connections, so only its per-tenant budget keeps it serving;
	// the test process needs room for those connections and the tarpits.
	noisyServeNofile = 4096
	noisyTestNofile  = idleConns + tarpitChecks + 1024
	// noisyLBQuota is b's quotas.loadBalancers: its front and one for each
	// abuse of the second round that runs at once ("all at once").
	noisyLBQuota = 7
	// streamTimeout bounds one change on a tenant stream.
	streamTimeout = 60 * time.Second
)

// noisyBackend is an HTTP backend of a tenant. Its health endpoint can be
// made to fail while it keeps serving requests, so that an ejection shows
// as the end of its hits without failing a single client request.
type noisyBackend struct {
	name    string
	addr    string
	hits    atomic.Int64
	lastHit atomic.Int64 // unix nanoseconds of the last request other than /healthz
	failing atomic.Bool
}

func startNoisyBackend(tb testing.TB, name, ip string) *noisyBackend {
	tb.Helper()
	b, stop, err := serveNoisyBackend(name, ip)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return b
}

// serveNoisyBackend starts a backend on ip; stop closes it.
func serveNoisyBackend(name, ip string) (*noisyBackend, func(), error) {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return nil, nil, fmt.Errorf("backend %s: %w", name, err)
	}
	b := &noisyBackend{name: name, addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if b.failing.Load() {
				http.Error(w, "failing", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
			return
		}
		b.hits.Add(1)
		b.lastHit.Store(time.Now().UnixNano())
		fmt.Fprintln(w, b.name)
	})}
	go srv.Serve(ln)
	return b, func() { srv.Close() }, nil
}

// noisyLab is the running lab.
type noisyLab struct {
	tb       testing.TB
	c        *cluster
	n        *node
	tl       *tenantLab // admin connection and credentials
	dir      string
	a1, a2   *noisyBackend // a's members: their addresses (they run in aSide)
	aSide    *aSide        // tenant a's process: its members and probers
	bWeb     *noisyBackend
	certA    string // PEM file of a's certificate (the TLS clients' root)
	credsA   string
	credsB   string
	overlaps bool // b's networks overlap the VIP pool (the operator's apply was taken)
	// together: the phases run at once ("all at once"), where b's other
	// abuses spend the budgets one abuse alone has to itself.
	together bool
}

func newNoisyLab(tb testing.TB) *noisyLab {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur < noisyTestNofile {
		unavailable(tb, "the test opens %d connections and %d tarpits: it needs a descriptor limit of %d, it has %d (raise the hard limit, e.g. ulimit -Hn)",
			idleConns, tarpitChecks, noisyTestNofile, lim.Cur)
	}
	l := &noisyLab{tb: tb, dir: tb.TempDir()}
	l.c = newCluster(tb)
	l.c.nofile = noisyServeNofile
	l.n = l.c.bootstrap()
	l.tl = &tenantLab{t: tb, c: l.c, conn: dialAll(tb, l.c)}

	l.aSide = startASide(tb, l)
	l.a1 = &noisyBackend{name: "a1", addr: l.aSide.addrs.A1}
	l.a2 = &noisyBackend{name: "a2", addr: l.aSide.addrs.A2}
	l.bWeb = startNoisyBackend(tb, "b1", "127.0.51.2")

	l.apply("tenants", fmt.Sprintf(`
kind: VIPPool
name: noisy
cidrs: [%s]
mode: static
---
kind: Tenant
name: a
domains: [a.example]
networks: [%s]
pools: [noisy]
---
kind: Tenant
name: b
domains: [b.example]
networks: [%s]
pools: [noisy]
quotas: { loadBalancers: %d }
`, noisyPool, noisyNetA, noisyNetB, noisyLBQuota))
	// An operator lets b's backend network overlap the VIP pool, as a
	// tenant network that covers a pool would: what b then points its
	// members at is what the self-dial phase tries.
	if err := l.tryApply("overlap", fmt.Sprintf(`
kind: Tenant
name: b
domains: [b.example]
networks: [%s, %s]
pools: [noisy]
quotas: { loadBalancers: %d }
`, noisyNetB, noisyPool, noisyLBQuota)); err != nil {
		tb.Logf("b's networks may not overlap the VIP pool: %v", err)
	} else {
		l.overlaps = true
	}

	certA, keyA := selfSignedFiles(tb, l.dir, noisyHostA)
	certB, keyB := selfSignedFiles(tb, l.dir, noisyHostB)
	l.certA = certA
	l.cli("cert", "upload", "shop-a", "--tenant", "a", "--cert", certA, "--key", keyA)
	l.cli("cert", "upload", "shop-b", "--tenant", "b", "--cert", certB, "--key", keyB)

	l.apply("load balancers", fmt.Sprintf(`
kind: LoadBalancer
name: shop
tenant: a
vip: { pool: noisy, address: "%[1]s" }
listeners:
  - { port: %[3]d, protocol: http }
  - { port: %[4]d, protocol: https, tls: { certificates: [shop-a], minVersion: tls1.3 } }
  - { port: %[5]d, protocol: tcp, pool: web }
routes: [{ host: %[6]s, path: /, pool: web }]
pools:
  web:
    healthCheck: { http: { path: /healthz }, interval: 1s, timeout: 500ms, rise: 1, fall: 2 }
    members: ["%[7]s", "%[8]s"]
---
kind: LoadBalancer
name: front
tenant: b
vip: { pool: noisy, address: "%[2]s" }
listeners:
  - { port: %[3]d, protocol: http }
  - { port: %[4]d, protocol: https, tls: { certificates: [shop-b], minVersion: tls1.3 } }
routes: [{ host: %[9]s, path: /, pool: web }]
pools: { web: { members: ["%[10]s"] } }
`, noisyVIPA, noisyVIPB, noisyHTTPPort, noisyTLSPort, noisyTCPPort, noisyHostA, l.a1.addr, l.a2.addr, noisyHostB, l.bWeb.addr))

	l.credsA = l.tl.credentials("a")
	l.credsB = l.tl.credentials("b")

	frontA := net.JoinHostPort(noisyVIPA, fmt.Sprint(noisyHTTPPort))
	waitFor(tb, syncTimeout, "a's load balancer answers from both members", func() error {
		seen := map[string]bool{}
		for range 6 {
			name, err := httpNameFor(frontA, noisyHostA)
			if err != nil {
				return err
			}
			seen[name] = true
		}
		if !seen["a1"] || !seen["a2"] {
			return fmt.Errorf("answered by %v", seen)
		}
		return nil
	})
	waitFor(tb, syncTimeout, "a's TCP listener answers", func() error {
		_, err := tcpProbe(net.JoinHostPort(noisyVIPA, fmt.Sprint(noisyTCPPort)))
		return err
	})
	waitFor(tb, syncTimeout, "b's load balancer answers", func() error {
		_, err := httpNameFor(net.JoinHostPort(noisyVIPB, fmt.Sprint(noisyHTTPPort)), noisyHostB)
		return err
	})
	return l
}

// cli runs a CLI command against the host and fails the test on error.
func (l *noisyLab) cli(args ...string) string {
	l.tb.Helper()
	out, err := l.c.cli(l.n, args...)
	if err != nil {
		l.tb.Fatal(err)
	}
	return out
}

func (l *noisyLab) tryApply(name, manifest string) error {
	path := filepath.Join(l.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		return err
	}
	_, err := l.c.cli(l.n, "apply", "-f", path)
	return err
}

func (l *noisyLab) apply(name, manifest string) {
	l.tb.Helper()
	if err := l.tryApply(name, manifest); err != nil {
		l.tb.Fatal(err)
	}
}

// tenantAgent speaks the tenant stream with a tenant's credentials, as an
// agent would (or an attacker holding its credentials). A stream the server
// ends is opened again by the next change.
type tenantAgent struct {
	name string
	cc   *grpc.ClientConn
	cur  *syncStream
	// throttled counts the notices that a change waits for the tenant's
	// write budget; throttleReason holds the last one's reason.
	throttled      atomic.Int64
	throttleReason atomic.Value
}

// syncStream is one Sync call and what the server sent on it.
type syncStream struct {
	s       pb.TenantSync_SyncClient
	cancel  context.CancelFunc
	welcome chan *pb.SyncWelcome
	acks    chan *pb.SyncAck
	done    chan struct{} // closed when the server ended the stream
	err     error         // why, once done is closed
	seq     uint64
}

func dialTenant(tb testing.TB, name, creds string) *tenantAgent {
	tb.Helper()
	return dialTenantAt(tb, name, creds, "")
}

// dialTenantAt is dialTenant to one host's API address (server), or to the
// first the credentials name when server is "".
func dialTenantAt(tb testing.TB, name, creds, server string) *tenantAgent {
	tb.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(creds, f))
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	cfg, err := pki.ClientTLS(read("ca.crt"), read("tls.crt"), read("tls.key"))
	if err != nil {
		tb.Fatal(err)
	}
	if server == "" {
		server = strings.Split(strings.TrimSpace(string(read("servers"))), ",")[0]
	}
	cc, err := grpc.NewClient(server, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return &tenantAgent{name: name, cc: cc}
}

// open starts a stream; with hello it sends the hello and waits for the
// welcome.
func (a *tenantAgent) open(hello bool) (*syncStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := pb.NewTenantSyncClient(a.cc).Sync(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	st := &syncStream{s: s, cancel: cancel, welcome: make(chan *pb.SyncWelcome, 1), acks: make(chan *pb.SyncAck, 16), done: make(chan struct{})}
	go func() {
		defer close(st.done)
		for {
			msg, err := s.Recv()
			if err != nil {
				st.err = err
				return
			}
			switch {
			case msg.GetWelcome() != nil:
				st.welcome <- msg.GetWelcome()
			case msg.GetAck() != nil:
				select {
				case st.acks <- msg.GetAck():
				default: // an ack no one waits for any more
				}
			case msg.GetStatus().GetThrottled() != nil:
				a.throttled.Add(1)
				a.throttleReason.Store(msg.GetStatus().GetThrottled().GetReason())
			}
		}
	}()
	if !hello {
		return st, nil
	}
	if err := s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Hello{Hello: &pb.SyncHello{Agent: a.name, Version: "noisy"}}}); err != nil {
		st.close()
		return nil, fmt.Errorf("send hello: %w", err)
	}
	select {
	case <-st.welcome:
		return st, nil
	case <-st.done:
		return nil, fmt.Errorf("stream ended before the welcome: %w", st.err)
	case <-time.After(streamTimeout):
		st.close()
		return nil, fmt.Errorf("no welcome within %s", streamTimeout)
	}
}

func (st *syncStream) close() { st.cancel() }

// change sends one change and returns its ack. A stream that fails is
// dropped; the next change opens a new one.
func (a *tenantAgent) change(upserts []*pb.LoadBalancer, removals ...string) (*pb.SyncAck, error) {
	return a.changeBy(time.Now().Add(streamTimeout), upserts, removals...)
}

// changeBy is change with a deadline for its ack; at the deadline the
// stream is closed (the server drops the change if it was not written
// yet) and the next change opens another.
func (a *tenantAgent) changeBy(by time.Time, upserts []*pb.LoadBalancer, removals ...string) (*pb.SyncAck, error) {
	if a.cur == nil {
		st, err := a.open(true)
		if err != nil {
			return nil, err
		}
		a.cur = st
	}
	st := a.cur
	st.seq++
	ch := &pb.SyncChange{Seq: st.seq, Removals: removals}
	for _, lb := range upserts {
		ch.Upserts = append(ch.Upserts, &pb.SyncUpsert{LoadBalancer: lb, Version: syncspec.Version(lb)})
	}
	fail := func(err error) (*pb.SyncAck, error) {
		st.close()
		a.cur = nil
		return nil, err
	}
	if err := st.s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
		<-st.done
		return fail(fmt.Errorf("send change %d: %w", st.seq, cmpErr(st.err, err)))
	}
	deadline := time.NewTimer(time.Until(by))
	defer deadline.Stop()
	for {
		select {
		case ack := <-st.acks:
			if ack.GetSeq() == st.seq {
				return ack, nil
			}
		case <-st.done:
			return fail(fmt.Errorf("stream ended before ack %d: %w", st.seq, st.err))
		case <-deadline.C:
			return fail(fmt.Errorf("no ack for change %d by %s: %w", st.seq, by.UTC().Format("15:04:05.000"), errNoAckInTime))
		}
	}
}

// errNoAckInTime: a change was not acked by its deadline.
var errNoAckInTime = errors.New("no ack in time")

func cmpErr(a, b error) error {
	if a != nil && !errors.Is(a, io.EOF) {
		return a
	}
	return b
}

func (a *tenantAgent) close() {
	if a.cur != nil {
		a.cur.close()
		a.cur = nil
	}
}

// verdicts splits an ack into the names stored and the names refused
// (with their reasons).
func verdicts(ack *pb.SyncAck) (stored []string, refused map[string]string) {
	refused = map[string]string{}
	for _, r := range ack.GetResults() {
		if r.GetError() != "" {
			refused[r.GetName()] = r.GetError()
		} else if !r.GetRemoved() {
			stored = append(stored, r.GetName())
		}
	}
	return stored, refused
}
