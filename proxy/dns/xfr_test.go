package dns

import (
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

const (
	testKey    = "xfr."
	testSecret = "TOjl4Zy59Y7sf4bzbq4EsjSwH6vrWVwBkFpyuCQ1qrI="
)

func xfrConfig(notifyTo string) Config {
	cfg := testConfig()
	cfg.ResponsesPerSecond = -1
	sec, err := ParseSecondary(notifyTo + "=xfr")
	if err != nil {
		panic(err)
	}
	cfg.Secondaries = []Secondary{sec}
	cfg.TSIGKeys = map[string]string{testKey: testSecret}
	return cfg
}

// transfer asks addr for zone over TCP from the address from, signed
// with secret when not "", and returns the records or the error.
func transfer(from, addr, zone string, secret string, ixfrFrom uint32) ([]mdns.RR, error) {
	m := new(mdns.Msg)
	if ixfrFrom != 0 {
		m.SetIxfr(zone, ixfrFrom, "ns1.lb.example.com.", "hostmaster."+zone)
	} else {
		m.SetAxfr(zone)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tr := &mdns.Transfer{Conn: &mdns.Conn{Conn: c}}
	if secret != "" {
		m.SetTsig(testKey, mdns.HmacSHA256, 300, time.Now().Unix())
		tr.TsigSecret = map[string]string{testKey: secret}
	}
	ch, err := tr.In(m, addr)
	if err != nil {
		return nil, err
	}
	var out []mdns.RR
	for env := range ch {
		if env.Error != nil {
			return nil, env.Error
		}
		out = append(out, env.RR...)
	}
	return out, nil
}

// TestTransfersOnlyToSecondariesWithTheirKey asks for the zone at the
// socket as an attacker would: from an address not listed, unsigned,
// with a wrong secret; then as the secondary, whole and by changes.
func TestTransfersOnlyToSecondariesWithTheirKey(t *testing.T) {
	t.Parallel()
	s, addr := startServer(t, xfrConfig("127.0.0.1:9"), testState())
	zone := "acme.example."
	// The table compiled and readiness set: wait for the copy to hold it.
	var first *mdns.SOA
	for deadline := time.Now().Add(10 * time.Second); ; {
		if soa := s.zoneSOA(zone); soa != nil {
			if rrs, err := transfer("127.0.0.1", addr, zone, testSecret, 0); err == nil && hasA(rrs, "shop.acme.example.", "192.0.2.10") {
				first = rrs[0].(*mdns.SOA)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the secondary never got shop.acme.example in the zone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		what, from, secret string
	}{
		{"an address not listed, with the key", "127.0.0.2", testSecret},
		{"the secondary's address, unsigned", "127.0.0.1", ""},
		{"the secondary's address, a wrong secret", "127.0.0.1", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
	} {
		if rrs, err := transfer(c.from, addr, zone, c.secret, 0); err == nil {
			t.Errorf("%s: transferred %d records", c.what, len(rrs))
		} else {
			t.Logf("%s: %v", c.what, err)
		}
	}
	if got := s.xfr.stats.Refused.Load(); got < 3 {
		t.Errorf("%d transfers refused, want 3", got)
	}
	// AXFR over UDP is refused; a query's SOA has the copy's serial.
	if m := ask(t, "udp", addr, zone, mdns.TypeSOA, false); len(m.Answer) != 1 || m.Answer[0].(*mdns.SOA).Serial != first.Serial {
		t.Fatalf("SOA query: %v, transfer's serial %d", m.Answer, first.Serial)
	}
	// shop2 goes down: the serial increases, IXFR from the first gives
	// the change alone.
	s.SetReadyFor(map[string]string{"acme/shop2": "no member is up"}, nil)
	var rrs []mdns.RR
	for deadline := time.Now().Add(10 * time.Second); ; {
		if soa := s.zoneSOA(zone); soa != nil && soa.Serial != first.Serial {
			var err error
			if rrs, err = transfer("127.0.0.1", addr, zone, testSecret, first.Serial); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the serial never changed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(rrs) != 5 || rrs[1].(*mdns.SOA).Serial != first.Serial || !hasA(rrs[2:3], "shop.acme.example.", "192.0.2.11") {
		t.Fatalf("IXFR from %d: %v", first.Serial, rrs)
	}
	// From a serial the journal does not hold: the whole zone.
	if rrs, err := transfer("127.0.0.1", addr, zone, testSecret, first.Serial-100); err != nil || len(rrs) < 5 || hasA(rrs, "shop.acme.example.", "192.0.2.11") {
		t.Fatalf("IXFR from an unknown serial: %v %v", rrs, err)
	}
}

func hasA(rrs []mdns.RR, name, addr string) bool {
	for _, rr := range rrs {
		if a, ok := rr.(*mdns.A); ok && a.Hdr.Name == name && a.A.String() == addr {
			return true
		}
	}
	return false
}

func TestTSIGKeysRefused(t *testing.T) {
	t.Parallel()
	good := `key "xfr" { algorithm hmac-sha256; secret "` + testSecret + `"; };`
	if keys, err := ParseTSIGKeys(good); err != nil || keys[testKey] != testSecret {
		t.Fatalf("tsig-keygen's output: %v %v", keys, err)
	}
	for _, c := range []struct{ text, want string }{
		{`key "old" { algorithm hmac-md5; secret "` + testSecret + `"; };`, `key "old": give algorithm hmac-sha256`},
		{`key "short" { algorithm hmac-sha256; secret "c2hvcnQ="; };`, "at least 32 bytes"},
		{`key "nosecret" { algorithm hmac-sha256; };`, "no secret"},
		{good + good, `key "xfr" given twice`},
		{"secret nothing", "no key"},
	} {
		if _, err := ParseTSIGKeys(c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %v, want %q", c.text, err, c.want)
		}
	}
	cfg := xfrConfig("127.0.0.1:53")
	cfg.TSIGKeys["spare."] = testSecret
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), `key "spare." is used by no --dns-secondaries or --dns-push entry`) {
		t.Errorf("a key no secondary uses: %v", err)
	}
	for _, s := range []string{"192.0.2.10", "host.example=xfr", "192.0.2.10:0=xfr"} {
		if _, err := ParseSecondary(s); err == nil {
			t.Errorf("secondary %q accepted", s)
		}
	}
	if sec, err := ParseSecondary("[2001:db8::10]:5300=XFR"); err != nil || sec.Addr.Port() != 5300 || sec.Key != "xfr." {
		t.Errorf("IPv6 with port: %v %v", sec, err)
	}
}

func TestSerialFollowsTheClock(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_795_900_000, 0)
	first := nextSerial(nil, now)
	if got := nextSerial(&zoneCopy{serial: first}, now); got != first+1 {
		t.Errorf("a second change within one tick: %d, want %d", got, first+1)
	}
	// A restart a second later starts above what ran before (RFC 1982),
	// also across the wrap of 32 bits.
	if got := nextSerial(nil, now.Add(time.Second)); int32(got-(first+1)) <= 0 {
		t.Errorf("after a restart: %d not above %d", got, first+1)
	}
	if got := nextSerial(&zoneCopy{serial: 0xffff_fff0}, now); int32(got-0xffff_fff0) <= 0 {
		t.Errorf("serial %d not above 0xfffffff0 in serial arithmetic", got)
	}
}
