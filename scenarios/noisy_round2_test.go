package scenarios

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The abuses of the second round: what b can make the host spend through
// the data plane (HTTP/2 fan-out, handshakes, regular expressions, health
// checks, UDP replies) and through the API port without credentials.
const (
	// b's HTTP/2 connections and the streams each opens at once: 2,000
	// requests that each want a member connection for fanOutHold, more
	// than b's descriptors (a quarter of what the host does not keep).
	fanOutConns    = 50
	fanOutStreams  = 40
	fanOutHold     = 3 * time.Second
	handshakeConns = 8 // clients doing full handshakes in a loop
	abuseFor       = minPhase
	regexClients   = 16
	regexRate      = 64 // requests a second, all clients together (the attack measured 53)
	regexRoutes    = 1000
	checkMembers   = 1000 // b's HTTPS-checked members, each asking for a client certificate
	udpSources     = 64   // b's "victims": one flow each
	udpPerSource   = 4    // 40-byte datagrams each sends
	// udpAmplifyBound: bytes relayed per byte a source sent, at most. A
	// flow gets max(4 KiB, 3x) until its source sends again after a reply,
	// then max(4 KiB, 64x) (proxy/DESIGN.md): a spoofer that keeps
	// sending gets 64x, not the member's 1,400x. A source's 4 datagrams
	// of 40 bytes allow 10,240 bytes (over the floor), 7 replies of 1,400:
	// 61.25x, what the phase measures alone and with every abuse at once.
	udpAmplifyBound = 64
	// rsa16384Key is a committed key (generating one takes minutes).
	rsa16384Key = "testdata/noisy/rsa16384.key"
)

// roundTwoAlone is each abuse of the round on its own; noisyRoundTwo
// adds all of them at once.
var (
	roundTwoAlone = []noisyPhase{
		{"HTTP/2 fan-out", phaseH2FanOut},
		{"API port flood", phaseAPIFlood},
		{"expensive handshakes", phaseHandshakes},
		{"regex routes", phaseRegex},
		{"expensive checks", phaseExpensiveChecks},
		{"UDP reflection", phaseUDPReflect},
		{"rate-limited route", phaseRateLimit},
	}
	noisyRoundTwo = append(roundTwoAlone[:len(roundTwoAlone):len(roundTwoAlone)], noisyPhase{"all at once", phaseAllAtOnce})
)

// bUpsert stores one load balancer of b and returns its VIP, or "" with a
// note when it was refused.
func bUpsert(tb testing.TB, b *tenantAgent, lb *pb.LoadBalancer) (vip, refused string) {
	start := time.Now()
	ack, err := b.change([]*pb.LoadBalancer{lb})
	tb.Logf("b's upsert of %s at %s took %s", lb.GetName(), start.UTC().Format("15:04:05.000"), time.Since(start).Round(time.Millisecond))
	if err != nil {
		return "", "stream ended: " + err.Error()
	}
	for _, r := range ack.GetResults() {
		if r.GetName() != lb.GetName() {
			continue
		}
		if r.GetError() != "" {
			return "", r.GetError()
		}
		return r.GetAddress(), ""
	}
	return "", "no verdict"
}

// waitDial waits until addr accepts a TCP connection.
func waitDial(tb testing.TB, addr string) bool {
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Errorf("%s never accepted a connection", addr)
	return false
}

// slowBackend answers each request after hold, counting the connections
// it has open at once.
type slowBackend struct {
	addr          string
	open, maxOpen atomic.Int64
	served        atomic.Int64
	close         func()
}

func listenSlowBackend(ip string, hold time.Duration) (*slowBackend, error) {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return nil, err
	}
	s := &slowBackend{addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(hold)
		s.served.Add(1)
		fmt.Fprintln(w, "slow")
	}), ConnState: func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n := s.open.Add(1)
			for m := s.maxOpen.Load(); n > m && !s.maxOpen.CompareAndSwap(m, n); m = s.maxOpen.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			s.open.Add(-1)
		}
	}}
	go srv.Serve(ln)
	s.close = func() { srv.Close() }
	return s, nil
}

// phaseH2FanOut: fanOutConns HTTP/2 connections with fanOutStreams
// streams each to a member that takes fanOutHold per request. Every
// stream wants a member connection; b's budget must bound them.
func phaseH2FanOut(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	// The member and the clients are an attacker process: b's 2,000
	// streams must not queue a's probers in the test process.
	att := startAttacker(tb, "fanout")
	defer att.stop()
	var member fanOutResult
	if err := att.recv(&member); err != nil {
		tb.Errorf("fan-out attacker: %v", err)
		return nil
	}
	// Cleartext HTTP/2 (prior knowledge): the abuse is the streams, and
	// b's TLS handshakes are a budget of their own.
	host := "h2.b.example"
	lb := bLB("svc-fanout", []*pb.Listener{{Port: noisyHTTPPort, Protocol: "http"}},
		[]*pb.Route{{Host: host, Path: "/", Pool: "web"}}, &pb.BackendPool{Members: memberList(member.Addr)})
	vip, refused := bUpsert(tb, b, lb)
	if vip == "" {
		tb.Errorf("b's fan-out load balancer refused: %s", refused)
		return []string{"refused: " + shorten(refused)}
	}
	defer removeLBs(tb, b, "svc-fanout")
	addr := net.JoinHostPort(vip, fmt.Sprint(noisyHTTPPort))
	if !waitDial(tb, addr) {
		return nil
	}
	var got fanOutResult
	if err := att.send(addr + " " + host); err != nil {
		tb.Errorf("fan-out attacker: %v", err)
		return nil
	}
	if err := att.recv(&got); err != nil {
		tb.Errorf("fan-out attacker: %v", err)
		return nil
	}
	notes := []string{fmt.Sprintf("%d streams on %d connections (%d not opened): %d answered, %d refused or failed; the member saw at most %d connections at once",
		fanOutConns*fanOutStreams, fanOutConns, got.ConnFailed, got.OK, got.Failed, got.MaxOpen)}
	if got.FirstErr != "" {
		notes = append(notes, "first error: "+shorten(got.FirstErr))
	}
	switch {
	case got.OK == 0 && l.together:
		// b's other abuses hold b's descriptors and the machine's
		// attention: none of its streams getting through is b's budget
		// at work, not a missing abuse (the phase alone requires it).
		notes = append(notes, "none answered while b's other abuses ran")
	case got.OK == 0:
		tb.Errorf("no stream of b's fan-out was answered: the abuse did not happen")
	}
	return notes
}

// countHeld counts the connections the far end still holds open: a read
// that times out is open, EOF or a reset is closed.
func countHeld(conns []net.Conn) int64 {
	var held atomic.Int64
	var wg sync.WaitGroup
	for part := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for i := part; i < len(conns); i += 16 {
				c := conns[i]
				c.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, err := c.Read(buf)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					held.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return held.Load()
}

// certPair is a self-signed certificate for host with key, as PEM.
func certPair(tb testing.TB, host string, key crypto.Signer) (certPEM, keyPEM []byte) {
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		DNSNames: []string{host}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})
}

func readRSAKey(tb testing.TB, path string) *rsa.PrivateKey {
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		tb.Fatalf("%s: no PEM", path)
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return k.(*rsa.PrivateKey)
}

// rsa4096 is the committed RSA-4096 key (generating one in the test
// process costs seconds of CPU that a's probers would share).
func rsa4096(tb testing.TB) *rsa.PrivateKey { return readRSAKey(tb, "testdata/keys/rsa4096.key") }

// uploadCert uploads one certificate through b's stream and returns the
// refusal ("" when it was written).
func uploadCert(b *tenantAgent, name string, certPEM, keyPEM []byte) string {
	if b.cur == nil {
		st, err := b.open(true)
		if err != nil {
			return "stream: " + err.Error()
		}
		b.cur = st
	}
	st := b.cur
	st.seq++
	ch := &pb.SyncChange{Seq: st.seq, Certificates: []*pb.SyncCertificate{{Name: name, CertPem: certPEM, KeyPem: keyPEM}}}
	if err := st.s.Send(&pb.SyncRequest{Msg: &pb.SyncRequest_Change{Change: ch}}); err != nil {
		b.close()
		return "send: " + err.Error()
	}
	deadline := time.After(streamTimeout)
	for {
		select {
		case ack := <-st.acks:
			if ack.GetSeq() != st.seq {
				continue
			}
			for _, c := range ack.GetCertificates() {
				if c.GetName() == name {
					return c.GetError()
				}
			}
			return ""
		case <-st.done:
			b.cur = nil
			return "stream ended: " + fmt.Sprint(st.err)
		case <-deadline:
			b.close()
			return "no ack"
		}
	}
}

// phaseHandshakes: b uploads an RSA-16384 certificate (it must be
// refused), then serves the largest key it may with handshakeConns
// clients doing full handshakes, without resumption, as fast as they can.
func phaseHandshakes(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	host := "tls.b.example"
	var notes []string
	// The certificate is committed beside the key: signing it costs the
	// test process seconds of CPU.
	c, err := os.ReadFile(strings.TrimSuffix(rsa16384Key, ".key") + ".crt")
	if err != nil {
		tb.Fatal(err)
	}
	k, err := os.ReadFile(rsa16384Key)
	if err != nil {
		tb.Fatal(err)
	}
	if why := uploadCert(b, "k8s-rsa16384", c, k); why == "" {
		tb.Errorf("an RSA-16384 certificate was stored")
		notes = append(notes, "RSA-16384 stored")
	} else {
		notes = append(notes, "RSA-16384 refused: "+shorten(why))
	}
	c, k = certPair(tb, host, rsa4096(tb))
	if why := uploadCert(b, "k8s-rsa4096", c, k); why != "" {
		tb.Errorf("an RSA-4096 certificate was refused: %s", why)
		return append(notes, "RSA-4096 refused: "+shorten(why))
	}
	lb := bLB("svc-handshakes", []*pb.Listener{{Port: noisyTLSPort, Protocol: "https", Tls: &pb.TLSPolicy{Certificates: []string{"k8s-rsa4096"}}}},
		[]*pb.Route{{Host: host, Path: "/", Pool: "web"}}, &pb.BackendPool{Members: memberList(l.bWeb.addr)})
	vip, refused := bUpsert(tb, b, lb)
	if vip == "" {
		tb.Errorf("b's TLS load balancer refused: %s", refused)
		return append(notes, "refused: "+shorten(refused))
	}
	defer removeLBs(tb, b, "svc-handshakes")
	addr := net.JoinHostPort(vip, fmt.Sprint(noisyTLSPort))
	if !waitDial(tb, addr) {
		return notes
	}
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(abuseFor)
	for range handshakeConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
					&tls.Config{ServerName: host, InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
						CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}})
				if err != nil {
					failed.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				done.Add(1)
				c.Close()
			}
		}()
	}
	wg.Wait()
	return append(notes, fmt.Sprintf("RSA-4096: %d full handshakes done, %d refused or failed in %s", done.Load(), failed.Load(), abuseFor))
}

// phaseRegex: regexRoutes routes with regular expressions that no request
// matches, so that every request tries them all, from regexClients
// clients with long paths.
func phaseRegex(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	host := "rx.b.example"
	var notes []string
	var vip string
	for _, n := range []int{regexRoutes, 100, 10} {
		var routes []*pb.Route
		for i := range n {
			routes = append(routes, &pb.Route{Host: host, PathType: "regex", Pool: "web",
				Path: fmt.Sprintf(`/r%d/([a-z0-9]+-)*[a-z0-9]{1,64}(/[a-z]+)*/(x|y|z)+\.v%d$`, i, i)})
		}
		lb := bLB("svc-regex", []*pb.Listener{{Port: noisyHTTPPort, Protocol: "http"}}, routes, &pb.BackendPool{Members: memberList(l.bWeb.addr)})
		var refused string
		vip, refused = bUpsert(tb, b, lb)
		if vip != "" {
			notes = append(notes, fmt.Sprintf("%d regex routes stored", n))
			break
		}
		notes = append(notes, fmt.Sprintf("%d regex routes refused: %s", n, shorten(refused)))
	}
	if vip == "" {
		return notes
	}
	defer removeLBs(tb, b, "svc-regex")
	addr := net.JoinHostPort(vip, fmt.Sprint(noisyHTTPPort))
	if !waitDial(tb, addr) {
		return notes
	}
	path := "/r1/" + strings.Repeat("a-", 400) + strings.Repeat("b", 60) + "/zzzz.w"
	var codes sync.Map
	var sent atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(abuseFor)
	for c := range regexClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 5 * time.Second}
			every := time.Second * regexClients / regexRate
			for i := 0; ; i++ {
				at := start.Add(every*time.Duration(i) + every*time.Duration(c)/regexClients)
				if at.After(stop) {
					return
				}
				time.Sleep(time.Until(at))
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
				req.Host = host
				sent.Add(1)
				resp, err := hc.Do(req)
				key := "error"
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					key = fmt.Sprint(resp.StatusCode)
				}
				n, _ := codes.LoadOrStore(key, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		}()
	}
	wg.Wait()
	var got []string
	codes.Range(func(k, v any) bool {
		got = append(got, fmt.Sprintf("%v: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return append(notes, fmt.Sprintf("%d requests of %d-byte paths (%s)", sent.Load(), len(path), strings.Join(got, ", ")))
}

// phaseExpensiveChecks: checkMembers members checked over HTTPS every
// second with an RSA-4096 client key, each asking for it, so that every
// check that is not resumed makes the host sign with it.
func phaseExpensiveChecks(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	serverKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	sc, sk := certPair(tb, "check.b.example", serverKey)
	// The members are an attacker process: their handshakes must not
	// queue a's probers in the test process.
	att := startAttacker(tb, "checkmembers", checkCertEnv+"="+string(sc), checkKeyEnv+"="+string(sk))
	defer att.stop()
	var members checkMembersResult
	if err := att.recv(&members); err != nil {
		tb.Errorf("check members: %v", err)
		return nil
	}
	cc, ck := certPair(tb, "client.b.example", rsa4096(tb))
	hc := &pb.HealthCheck{Https: &pb.HTTPSCheck{Path: "/", InsecureSkipVerify: true, ClientCertPem: string(cc), ClientKeyPem: string(ck)},
		Interval: durationpb.New(time.Second), Timeout: durationpb.New(500 * time.Millisecond), Rise: 1, Fall: 3}
	lb := bLB("svc-checks", []*pb.Listener{{Port: 9400, Protocol: "tcp", Pool: "web"}}, nil, &pb.BackendPool{Members: memberList(members.Addrs...), HealthCheck: hc})
	vip, refused := bUpsert(tb, b, lb)
	if vip == "" {
		tb.Errorf("b's checked load balancer refused: %s", refused)
		return []string{"refused: " + shorten(refused)}
	}
	start := time.Now()
	time.Sleep(abuseFor)
	removeLBs(tb, b, "svc-checks")
	took := time.Since(start)
	att.in.Close()
	var got checkMembersResult
	if err := att.recv(&got); err != nil {
		tb.Errorf("check members: %v", err)
	}
	return []string{fmt.Sprintf("%d members checked each second with an RSA-4096 client key: %d connections, %d client signatures in %.0fs (%.0f/s)",
		len(members.Addrs), got.Conns, got.Handshakes, took.Seconds(), float64(got.Handshakes)/took.Seconds())}
}

// phaseUDPReflect: a member that answers each datagram with 40 datagrams
// of 1,400 bytes, and udpSources sources that each send udpPerSource
// datagrams of 40 bytes: what the listener relays to a source that never
// answered is what a spoofed victim would get.
func phaseUDPReflect(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	amp, err := net.ListenPacket("udp", "127.0.51.5:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer amp.Close()
	go func() {
		buf := make([]byte, 2048)
		big := make([]byte, 1400)
		for {
			_, from, err := amp.ReadFrom(buf)
			if err != nil {
				return
			}
			for range 40 {
				amp.WriteTo(big, from)
			}
		}
	}()
	lb := bLB("svc-udp", []*pb.Listener{{Port: 9300, Protocol: "udp", Pool: "web"}}, nil, &pb.BackendPool{Members: memberList(amp.LocalAddr().String())})
	vip, refused := bUpsert(tb, b, lb)
	if vip == "" {
		tb.Errorf("b's UDP load balancer refused: %s", refused)
		return []string{"refused: " + shorten(refused)}
	}
	defer removeLBs(tb, b, "svc-udp")
	to := &net.UDPAddr{IP: net.ParseIP(vip), Port: 9300}
	// The listener is bound once a datagram comes back.
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 63, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer probe.Close()
	deadline := time.Now().Add(syncTimeout)
	for time.Now().Before(deadline) {
		probe.WriteTo([]byte("ping"), to)
		probe.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := probe.ReadFrom(make([]byte, 2048)); err == nil {
			break
		}
	}
	var sent, got atomic.Int64
	var wg sync.WaitGroup
	for i := range udpSources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 63, byte(2+i%200))})
			if err != nil {
				tb.Errorf("source %d: %v", i, err)
				return
			}
			defer c.Close()
			go func() {
				buf := make([]byte, 2048)
				for {
					c.SetReadDeadline(time.Now().Add(3 * time.Second))
					n, _, err := c.ReadFrom(buf)
					if err != nil {
						return
					}
					got.Add(int64(n))
				}
			}()
			msg := make([]byte, 40)
			for range udpPerSource {
				if _, err := c.WriteTo(msg, to); err == nil {
					sent.Add(int64(len(msg)))
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(3 * time.Second)
		}()
	}
	wg.Wait()
	factor := float64(got.Load()) / float64(max(sent.Load(), 1))
	if factor > udpAmplifyBound {
		tb.Errorf("b's UDP listener relayed %.0f bytes for each byte of sources that never answered, want at most %d", factor, udpAmplifyBound)
	}
	return []string{fmt.Sprintf("%d sources sent %d B, got %d B back: amplification %.1f", udpSources, sent.Load(), got.Load(), factor)}
}

// phaseAllAtOnce runs every abuse of this round at the same time, each
// from a stream of its own.
func phaseAllAtOnce(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	l.together = true
	defer func() { l.together = false }()
	var (
		mu    sync.Mutex
		notes []string
		wg    sync.WaitGroup
	)
	// Each abuse's stream is open (authenticated, its first change
	// answered) before any abuse starts: the API port flood evicts
	// connections still in their handshake, b's own included. The first
	// abuse uses b's stream of the whole scenario: a tenant holds at most
	// 8 API connections (the host's log: "closed at a bound ...
	// reason=tenant bound=8").
	cpuBefore, _ := scrapeTenantCPU(l.n)
	agents := make([]*tenantAgent, len(roundTwoAlone))
	agents[0] = b
	for i, ph := range roundTwoAlone[1:] {
		i++
		agents[i] = dialTenant(tb, "b-"+strings.ReplaceAll(ph.name, " ", "-"), l.credsB)
		defer agents[i].close()
		if _, err := agents[i].change(nil); err != nil {
			tb.Fatalf("b's stream for %s: %v", ph.name, err)
		}
	}
	for i, ph := range roundTwoAlone {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := ph.run(tb, l, agents[i])
			mu.Lock()
			notes = append(notes, ph.name+": "+strings.Join(n, ", "))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return append(notes, cpuNote(l.n, cpuBefore))
}

// TestNoisyNeighbourRoundTwoKeys checks the committed key the handshake
// phase uploads is what it says.
func TestNoisyNeighbourRoundTwoKeys(t *testing.T) {
	t.Parallel()
	k := readRSAKey(t, filepath.Clean(rsa16384Key))
	if n := k.N.BitLen(); n != 16384 {
		t.Fatalf("%s has %d bits", rsa16384Key, n)
	}
}
