package proxy

import (
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// Every datagram an HTTP/3 port reads is a unit of its tenant's work,
// so QUIC's per-packet work is split to the tenant whose port it reached:
// 200 datagrams that never become a connection (admit never sees them)
// counted nothing before.
func TestHTTP3DatagramsAreTheirTenantsWork(t *testing.T) {
	bes := map[string]*routingBackend{}
	for _, n := range []string{"main", "beta", "other", "mirror"} {
		bes[n] = startRoutingBackend(t, n)
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	cpu := cpubudget.New(cpubudget.Options{})
	p, _ := newProxy(t, Config{HTTP: newH3Term(t, srv), CPU: cpu})
	port := freePort(t)
	update(t, p, h3LB(port, bes))
	if st := p.Status()["acme/gw"]; len(st) != 0 {
		t.Fatalf("problems: %v", st)
	}
	target := vipAddr("127.0.0.2", port)
	acme := cpu.Tenant("acme")
	before := acme.HostStat().Work
	c, err := net.Dial("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	junk := make([]byte, 1200)
	const sent = 200
	for i := range sent {
		rand.Read(junk)
		junk[0] = 0x40 // a short header: no connection has this ID
		if _, err := c.Write(junk); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond) // within the socket's buffer
		}
	}
	waitFor(t, 10*time.Second, "acme's work to count the datagrams", func() bool {
		return acme.HostStat().Work-before >= sent
	})
	// A request over HTTP/3 counts its datagrams too, beyond its
	// connection and request units.
	w0 := acme.HostStat().Work
	cl := newH3Client(t, target)
	resp, err := cl.do("GET", "https://gw.acme.example:"+portOf(target)+"/", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := acme.HostStat().Work - w0; got < 4 {
		t.Errorf("an HTTP/3 request counted %d units of acme's work, want its connection, request and datagrams", got)
	}
}
