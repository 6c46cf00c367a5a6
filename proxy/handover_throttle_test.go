package proxy

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestHandoverServesATenantInDebt: an HTTP connection accepted while its
// VIP is handed over is drained (its answer says Connection: close), and
// one of a tenant in debt of its CPU budget first waits at the tenant's
// gate. The drain must not end that wait: the client gets its answer,
// late, and then reconnects, as every other client of the handover does;
// it does not see its connection closed without one.
func TestHandoverServesATenantInDebt(t *testing.T) {
	member := startHTTPMember(t)
	cpu := cpubudget.New(cpubudget.Options{HostMillicores: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cpu.Run(ctx)
	p, _ := newProxy(t, Config{HTTP: NewHTTP(l7.New(l7.Config{}), nil), CPU: cpu})
	port := freePort(t)
	objs := twoTenants(httpLB("a", "web", "127.0.0.2", port, member), httpLB("b", "other", "127.0.0.3", port, member))
	for _, o := range objs {
		if tn := o.GetTenant(); tn.GetName() == "a" {
			tn.Quotas = &pb.Quotas{CpuMillicores: 100}
		}
	}
	if err := p.Update(objs, 1); err != nil {
		t.Fatal(err)
	}
	url := "http://" + vipAddr("127.0.0.2", port) + "/"
	get := func() (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, err
	}
	if _, err := get(); err != nil {
		t.Fatal(err)
	}

	p.HandOver([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	defer p.EndHandover()
	a := cpu.Tenant("a")
	for range 3 {
		// A second's worth of its budget: its gate closes at the
		// accountant's next tick and opens about a second later.
		a.ChargeDirect(100 * time.Millisecond)
		eventually(t, "tenant a in debt", func() bool { return a.HostStat().InDebt })
		waits := a.HostStat().Waits
		resp, err := get()
		if err != nil {
			t.Fatalf("a new connection of a tenant in debt during the handover: %v (want an answer that says Connection: close)", err)
		}
		if resp.StatusCode != http.StatusOK || !resp.Close {
			t.Fatalf("status %d, Connection: close %v; want 200 and close", resp.StatusCode, resp.Close)
		}
		if a.HostStat().Waits == waits {
			t.Fatalf("the connection did not wait at the tenant's gate")
		}
	}
}
