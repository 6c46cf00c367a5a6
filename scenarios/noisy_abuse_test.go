package scenarios

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// phaseIdleConns: idleConns idle connections to b's HTTP listener, from
// four source addresses so that loopback's ephemeral ports suffice, opened
// at idleRate (the attacker shares the two cores with the LB host and a's
// probers, so an unpaced dial storm measures the CPU, not the budgets) and
// held for idleHold.
func phaseIdleConns(tb testing.TB, l *noisyLab, _ *tenantAgent) []string {
	to := net.JoinHostPort(noisyVIPB, fmt.Sprint(noisyHTTPPort))
	var (
		mu       sync.Mutex
		conns    []net.Conn
		failed   atomic.Int64
		firstErr atomic.Value
	)
	deadline := time.Now().Add(idleDialFor)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 60, byte(1+i%4))}}
				c, err := d.Dial("tcp", to)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := range idleConns {
		if time.Now().After(deadline) {
			break
		}
		if d := time.Until(start.Add(time.Duration(i) * time.Second / idleRate)); d > 0 {
			time.Sleep(d)
		}
		work <- i
	}
	close(work)
	wg.Wait()
	opened := len(conns)
	dialing := time.Since(start)
	time.Sleep(idleHold)
	// Count what the LB host still holds open: a read that times out is
	// an open connection, EOF or a reset is one it closed.
	var held atomic.Int64
	var check sync.WaitGroup
	for part := range 16 {
		check.Add(1)
		go func() {
			defer check.Done()
			buf := make([]byte, 1)
			for i := part; i < len(conns); i += 16 {
				c := conns[i]
				c.SetReadDeadline(time.Now().Add(time.Millisecond))
				_, err := c.Read(buf)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					held.Add(1)
				}
				c.Close()
			}
		}()
	}
	check.Wait()
	notes := []string{fmt.Sprintf("%d dialled in %.1fs, %d failed (%v), %d still open after %s", opened, dialing.Seconds(), failed.Load(), firstErr.Load(), held.Load(), idleHold)}
	return notes
}

// phaseTarpit: b health-checks tarpitChecks members that accept a
// connection and never answer, while one of a's members starts failing
// its health check: it must stop getting a's requests within ejectBound.
func phaseTarpit(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	// Listeners that are never accepted from: the kernel completes the
	// handshake and nothing ever answers.
	var addrs []string
	for i := range tarpitChecks {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.51.%d:0", 10+i%200))
		if err != nil {
			tb.Errorf("tarpit %d: %v", i, err)
			break
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	var notes []string
	stored := false
	for _, hc := range []*pb.HealthCheck{healthCheck(5*time.Minute, 5*time.Minute), healthCheck(2*time.Second, 2*time.Second), healthCheck(5*time.Second, 4*time.Second)} {
		lb := bLB("svc-tarpit", []*pb.Listener{{Port: 9200, Protocol: "tcp", Pool: "web"}}, nil,
			&pb.BackendPool{Members: memberList(addrs...), HealthCheck: hc})
		s, refused := upsertEach(tb, b, lb)
		if len(s) == 1 {
			notes = append(notes, fmt.Sprintf("%d checks (interval %s, timeout %s) stored", len(addrs), hc.GetInterval().AsDuration(), hc.GetTimeout().AsDuration()))
			stored = true
			break
		}
		notes = append(notes, fmt.Sprintf("interval %s refused: %s", hc.GetInterval().AsDuration(), shorten(refused["svc-tarpit"])))
	}
	if !stored {
		tb.Logf("no tarpit check of b was stored: %v", notes)
	}
	time.Sleep(3 * time.Second) // b's checks are under way

	eject := l.ejection(tb)
	notes = append(notes, eject)
	removeLBs(tb, b, "svc-tarpit")
	return notes
}

// ejection makes a2 fail its health check and measures how long it keeps
// getting a's requests; then it makes it healthy again.
func (l *noisyLab) ejection(tb testing.TB) string {
	flipped := time.Now()
	l.aSide.setFailing(tb, true)
	defer func() {
		l.aSide.setFailing(tb, false)
		back := time.Now()
		for time.Since(back) < syncTimeout && l.aSide.lastHit(tb) < back.UnixNano() {
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// Ejected once a2 has had no request for a second (a's probes reach
	// it about 60 times a second while it is in the pool).
	limit := flipped.Add(4 * ejectBound)
	for time.Now().Before(limit) {
		last := time.Unix(0, l.aSide.lastHit(tb))
		if time.Since(last) > time.Second {
			took := max(0, last.Sub(flipped))
			if took > ejectBound {
				tb.Errorf("a's failing member got requests for %.1fs, want at most %s", took.Seconds(), ejectBound)
			}
			return fmt.Sprintf("a's failing member ejected after %.1fs", took.Seconds())
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Errorf("a's failing member still got requests %s after it failed", 4*ejectBound)
	return fmt.Sprintf("a's failing member not ejected in %s", 4*ejectBound)
}

// countingCache is a client session cache that counts the sessions it
// hands out, so that a replay is known to have offered a ticket.
type countingCache struct {
	tls.ClientSessionCache
	offered int
}

func (c *countingCache) Get(key string) (*tls.ClientSessionState, bool) {
	s, ok := c.ClientSessionCache.Get(key)
	if ok && s != nil {
		c.offered++
	}
	return s, ok
}

// phaseTicketReplay: a client takes a TLS 1.3 session ticket from a's
// listener (SNI shop.a.example) and offers it to b's VIP; b must not
// resume it. A failed resumption makes the client drop the ticket, so
// every try starts with a new session from a.
func phaseTicketReplay(tb testing.TB, l *noisyLab, _ *tenantAgent) []string {
	pem, err := os.ReadFile(l.certA)
	if err != nil {
		tb.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	// handshake connects, sends a request and reads the answer, so that
	// the server's tickets have arrived.
	handshake := func(cache *countingCache, vip string) (resumed bool, err error) {
		cfg := &tls.Config{ServerName: noisyHostA, RootCAs: roots, ClientSessionCache: cache, MinVersion: tls.VersionTLS13}
		d := &net.Dialer{Timeout: aProbeTimeout}
		c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(vip, fmt.Sprint(noisyTLSPort)), cfg)
		if err != nil {
			return false, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(aProbeTimeout))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", noisyHostA)
		buf := make([]byte, 512)
		_, err = c.Read(buf)
		return c.ConnectionState().DidResume, err
	}
	// The tickets are real ones: a resumes them.
	own := &countingCache{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	_, err = handshake(own, noisyVIPA)
	againA, err2 := handshake(own, noisyVIPA)
	if err != nil || err2 != nil || !againA {
		tb.Errorf("a's own session did not resume on a (%v, %v): a replay would prove nothing", err, err2)
	}
	resumed, offered, refused := 0, 0, 0
	for range replayTries {
		cache := &countingCache{ClientSessionCache: tls.NewLRUClientSessionCache(4)}
		if _, err := handshake(cache, noisyVIPA); err != nil {
			tb.Errorf("full handshake with a: %v", err)
			continue
		}
		r, err := handshake(cache, noisyVIPB)
		offered += cache.offered
		if r {
			resumed++
		}
		if err != nil {
			refused++
		}
		time.Sleep(200 * time.Millisecond)
	}
	if resumed > 0 {
		tb.Errorf("a's TLS session resumed on b's VIP %d of %d times", resumed, replayTries)
	}
	if offered < replayTries {
		tb.Errorf("a's ticket was offered to b only %d of %d times", offered, replayTries)
	}
	return []string{fmt.Sprintf("a's ticket offered to b %d times, resumed %d, handshake refused %d", offered, resumed, refused), fmt.Sprintf("resumed on a: %t", againA)}
}

// phaseNoHello: b opens noHelloCount streams and never says hello. a's
// agent still connects; the server closes b's streams, after which b's
// agent connects again.
func phaseNoHello(tb testing.TB, l *noisyLab, b *tenantAgent) []string {
	b.close()
	bad := dialTenant(tb, "b-silent", l.credsB)
	start := time.Now()
	var streams []*syncStream
	for range noHelloCount {
		st, err := bad.open(false)
		if err != nil {
			tb.Errorf("open a stream: %v", err)
			continue
		}
		defer st.close()
		streams = append(streams, st)
	}
	a := dialTenant(tb, "a-agent", l.credsA)
	welcomeA := time.Now()
	if st, err := a.open(true); err != nil {
		tb.Errorf("a's agent while b holds %d silent streams: %v", len(streams), err)
	} else {
		st.close()
	}
	tookA := time.Since(welcomeA)

	var last time.Duration
	open := 0
	for _, st := range streams {
		select {
		case <-st.done:
		case <-time.After(time.Until(start.Add(noHelloBound))):
			open++
			continue
		}
		last = max(last, time.Since(start))
	}
	if open > 0 {
		tb.Errorf("%d of b's %d streams without a hello still open after %s", open, len(streams), noHelloBound)
	}
	welcomeB := time.Now()
	_, err := b.change(nil)
	again := fmt.Sprintf("b welcomed again in %.0fms", ms(time.Since(welcomeB)))
	if err != nil {
		tb.Errorf("b's agent after its silent streams: %v", err)
		again = "b's agent refused: " + shorten(err.Error())
	}
	return []string{
		fmt.Sprintf("a welcomed in %.0fms", ms(tookA)),
		fmt.Sprintf("%d silent streams, %d open after %s, last closed at %.1fs", len(streams), open, noHelloBound, last.Seconds()),
		again,
	}
}
