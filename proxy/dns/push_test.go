package dns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// startPrimary runs BIND as the primary of zone on 127.0.0.1:port, with
// a zone file holding its name server's glue and one stale address, and
// allowing updates and transfers signed with the key "push" (secret).
func startPrimary(t *testing.T, port int, zone, secret string) *syncBuffer {
	t.Helper()
	named, err := exec.LookPath("named")
	if err != nil {
		if named, err = exec.LookPath("/usr/sbin/named"); err != nil {
			if os.Getenv("CI") != "" { // .ci/run installs bind9: missing there is a failure
				t.Fatal("CI: BIND 9 (named) is not installed: apt-get install bind9")
			}
			t.Skip("BIND 9 (named) is not installed: apt-get install bind9")
		}
	}
	dir := t.TempDir()
	z := strings.TrimSuffix(zone, ".")
	zoneText := fmt.Sprintf(`$TTL 300
@	IN SOA ns1.%[1]s. hostmaster.%[1]s. 1 3600 600 86400 30
@	IN NS ns1.%[1]s.
ns1	IN A 127.0.0.1
stale	IN A 192.0.2.99
`, z)
	if err := os.WriteFile(filepath.Join(dir, "zone.db"), []byte(zoneText), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`key "push" { algorithm hmac-sha256; secret "%s"; };
options {
	directory "%[2]s";
	pid-file "%[2]s/named.pid";
	session-keyfile "%[2]s/session.key";
	managed-keys-directory "%[2]s";
	listen-on port %[3]d { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
	allow-query { any; };
};
controls { };
zone "%[4]s" {
	type primary;
	file "%[2]s/zone.db";
	allow-update { key push; };
	allow-transfer { key push; };
};
`, secret, dir, port, z)
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, named, "-g", "-n", "1", "-c", confPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("named:\n%s", log.String())
		}
	})
	return log
}

func pushConfig(namedAddr, secret string) (Config, *atomic.Bool) {
	cfg := testConfig()
	cfg.ResponsesPerSecond = -1
	p, err := ParsePush("acme.example=" + namedAddr + "=push")
	if err != nil {
		panic(err)
	}
	cfg.Push = []Push{p}
	cfg.TSIGKeys = map[string]string{"push.": secret}
	leader := &atomic.Bool{}
	cfg.Leader = leader.Load
	return cfg, leader
}

func pushStatus(s *Server) PushStatus { return s.PushStatus()[0] }

// TestPushToBINDPrimary has the server push its zone to a real BIND 9
// primary as RFC 2136 updates signed with TSIG: nothing while another
// host leads; on leading, the primary's stale address is deleted and the
// names answered (exact and wildcard) added, its name server's glue
// kept; a load balancer whose members are all down leaves the primary
// within a bound.
func TestPushToBINDPrimary(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	namedAddr := fmt.Sprintf("127.0.0.1:%d", port)
	startPrimary(t, port, "acme.example.", testSecret)
	cfg, leader := pushConfig(namedAddr, testSecret)
	s, _ := startServer(t, cfg, testState())

	// named up, not leading: nothing pushed for a few polls.
	askNamed(t, namedAddr, "stale.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.99"}) }, "its own stale record")
	time.Sleep(3 * pushPoll)
	if st := pushStatus(s); st.Active || st.Updates != 0 || st.Pushed != 0 {
		t.Fatalf("pushed while not leading: %+v", st)
	}

	start := time.Now()
	leader.Store(true)
	askNamed(t, namedAddr, "shop.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.10", "192.0.2.11"}) }, "with both addresses")
	t.Logf("the zone reached BIND %s after leading", time.Since(start))
	askNamed(t, namedAddr, "x.y.apps.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.20"}) }, "under the wildcard")
	askNamed(t, namedAddr, "stale.acme.example.", func(got []string) bool { return len(got) == 0 }, "without the stale record")
	askNamed(t, namedAddr, "ns1.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"127.0.0.1"}) }, "with its glue kept")
	// BIND answers the last update's records before the pusher has its
	// answer: the push's status (LastSuccess once pushOnce returns) is
	// waited for.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st := pushStatus(s)
		if st.Active && st.Updates != 0 && !st.LastSuccess.IsZero() && st.LastError == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after the first push: %+v", st)
		}
	}

	// shop2's members all down: its address leaves the primary.
	start = time.Now()
	s.SetReadyFor(map[string]string{"acme/shop2": "pools.web: no member is up"}, nil)
	askNamed(t, namedAddr, "shop.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.10"}) }, "without shop2")
	t.Logf("a member change reached BIND in %s", time.Since(start))
	// And shop's too: the name has no address left on the primary.
	start = time.Now()
	s.SetReadyFor(map[string]string{"acme/shop": "pools.web: no member is up"}, nil)
	askNamed(t, namedAddr, "shop.acme.example.", func(got []string) bool { return len(got) == 0 }, "without any address")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the A records left BIND after %s; want within 5s", took)
	}
	st := pushStatus(s)
	t.Logf("push status: %+v", st)
	if st.Records == 0 || st.Failures != 0 {
		t.Errorf("status: %+v", st)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	// A push may still be on its way (the last delete): compare the
	// metrics with a status read on both sides of the scrape, once two
	// such reads agree.
	var got map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		before := pushStatus(s)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		if after := pushStatus(s); before.Pushed == after.Pushed {
			st = after
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the push never settled")
		}
	}
	if got["teapot_lb_dns_push_records_total"] != float64(st.Pushed) || got["teapot_lb_dns_push_active"] != 1 || got["teapot_lb_dns_push_last_success_timestamp_seconds"] == 0 {
		t.Errorf("push metrics: %v, status %+v", got, st)
	}
	// explain node shows it, as the metrics do.
	h := &pb.HostObservation{}
	s.Observe(observe.Filter{}, h)
	var po *pb.DNSPushObservation
	for _, z := range h.GetDnsZones() {
		if z.GetZone() == "acme.example." {
			po = z.GetPush()
		}
	}
	if po == nil || !po.GetActive() || po.GetServer() != namedAddr || po.GetKey() != "push" || po.GetUpdates() != st.Updates || po.GetLastSuccess() == nil {
		t.Errorf("observation of the push: %v", po)
	}
}

// TestPushWithWrongKeyRefused: BIND refuses updates (and the transfer
// that reads the zone) signed with a secret not its own; the error is
// in the push's status and the push is retried with backoff.
func TestPushWithWrongKeyRefused(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	namedAddr := fmt.Sprintf("127.0.0.1:%d", port)
	namedLog := startPrimary(t, port, "acme.example.", testSecret)
	wrong := "AAAl4Zy59Y7sf4bzbq4EsjSwH6vrWVwBkFpyuCQ1qrI="
	cfg, leader := pushConfig(namedAddr, wrong)
	leader.Store(true)
	askNamed(t, namedAddr, "stale.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.99"}) }, "its own stale record")
	s, _ := startServer(t, cfg, testState())
	var st PushStatus
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st = pushStatus(s); st.Failures > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failure reported: %+v", st)
		}
	}
	t.Logf("status: %+v", st)
	if st.LastError == "" || st.Updates != 0 || st.Pushed != 0 || !st.LastSuccess.IsZero() {
		t.Errorf("status after a refused push: %+v", st)
	}
	if !strings.Contains(st.LastError, "refused the TSIG key") {
		t.Errorf("the error does not say the key was refused: %s", st.LastError)
	}
	// The update itself, with the wrong key, is refused too.
	pu := &pusher{p: cfg.Push[0], secret: wrong, known: map[string]mdns.RR{}}
	err := s.pushOnce(context.Background(), pu, false)
	t.Logf("update with the wrong key: %v", err)
	if err == nil || !strings.Contains(err.Error(), "refused the TSIG key") {
		t.Errorf("update with the wrong key: %v", err)
	}
	if !strings.Contains(namedLog.String(), "BADSIG") {
		t.Errorf("named's log does not show the signature refused (BADSIG)")
	}
	c := &mdns.Client{Net: "udp", Timeout: time.Second}
	if m, _, err := c.Exchange(query("shop.acme.example.", mdns.TypeA), namedAddr); err != nil || len(addrsOf(m)) != 0 {
		t.Errorf("BIND holds shop.acme.example after a refused push: %v %v", m, err)
	}
}

// TestPushRefusals: a push is taken only as ZONE=IP[:port]=KEY, for a
// zone this host serves, once, with a key of --dns-tsig-keys.
func TestPushRefusals(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"acme.example", "acme.example=192.0.2.53", "acme.example=host.example=push", "*.example=192.0.2.53=push", "acme.example=192.0.2.53:0=push"} {
		if _, err := ParsePush(s); err == nil {
			t.Errorf("push %q accepted", s)
		}
	}
	if p, err := ParsePush("ACME.example=[2001:db8::53]:5353=Push"); err != nil || p.Zone != "acme.example." || p.Server.Port() != 5353 || p.Key != "push." {
		t.Errorf("IPv6 with port: %+v %v", p, err)
	}
	if p, err := ParsePush("acme.example=192.0.2.53=push"); err != nil || p.Server.Port() != 53 {
		t.Errorf("default port: %+v %v", p, err)
	}
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Push[0].Zone = "other.example." }, "--dns-push other.example.: not a zone of --dns-zones"},
		{func(c *Config) { c.Push = append(c.Push, c.Push[0]) }, "the zone is given twice"},
		{func(c *Config) { c.Push[0].Key = "nope." }, `key "nope." is not in --dns-tsig-keys`},
		{func(c *Config) { c.TSIGKeys = nil }, "--dns-push needs --dns-tsig-keys"},
		{func(c *Config) { c.Addrs = nil }, "--dns-push needs --dns-addr"},
	} {
		cfg, _ := pushConfig("192.0.2.53:53", testSecret)
		if err := cfg.Check(); err != nil {
			t.Fatalf("the base config: %v", err)
		}
		c.change(&cfg)
		if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// TestPushInBoundedMessages: 250 names go to BIND in messages of at most
// MaxPushRecords records.
func TestPushInBoundedMessages(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	namedAddr := fmt.Sprintf("127.0.0.1:%d", port)
	startPrimary(t, port, "acme.example.", testSecret)
	cfg, leader := pushConfig(namedAddr, testSecret)
	leader.Store(true)
	state := testState()
	const n = 250
	for i := range n {
		state = append(state, lb("acme", fmt.Sprintf("many%d", i), "192.0.2.10", fmt.Sprintf("n%d.acme.example", i)))
	}
	askNamed(t, namedAddr, "stale.acme.example.", func(got []string) bool { return slices.Equal(got, []string{"192.0.2.99"}) }, "its own stale record")
	s, _ := startServer(t, cfg, state)
	askNamed(t, namedAddr, fmt.Sprintf("n%d.acme.example.", n-1), func(got []string) bool { return slices.Equal(got, []string{"192.0.2.10"}) }, "the last name")
	var st PushStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st = pushStatus(s); st.Records >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %+v", st)
		}
	}
	t.Logf("status: %+v", st)
	if min := uint64((st.Pushed + MaxPushRecords - 1) / MaxPushRecords); st.Updates < min || st.Pushed < n {
		t.Errorf("%d records in %d updates; want at most %d a message", st.Pushed, st.Updates, MaxPushRecords)
	}
}
