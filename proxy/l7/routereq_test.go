package l7

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/teapot-lb/teapot-lb/proxy/internal/reqview"
)

// routeRequest reads the fields forwardFields decides as the member
// receives them, and every other field as the client sent it.
func TestRouteRequestFields(t *testing.T) {
	hdr := http.Header{
		"X-Forwarded-For":   {"10.0.0.1"},
		"X-Forwarded-Proto": {"gopher"},
		"X-Real-Ip":         {"10.0.0.2"},
		"X-Request-Id":      {"has space", "trace-1"},
		"X-Client-Subject":  {"CN=forged"},
		"X-Version":         {"v2"},
	}
	client := netip.MustParseAddrPort("192.0.2.1:1234")
	for _, tc := range []struct {
		trusted bool
		want    map[string]string // "-": absent
	}{
		{false, map[string]string{"X-Forwarded-For": "192.0.2.1", "X-Forwarded-Proto": "https", "X-Real-Ip": "-",
			"X-Client-Subject": "CN=alice", "X-Version": "v2", "Forwarded": `for=192.0.2.1;host=shop.example;proto=https`}},
		{true, map[string]string{"X-Forwarded-For": "10.0.0.1, 192.0.2.1", "X-Forwarded-Proto": "gopher", "X-Real-Ip": "10.0.0.2",
			"X-Request-Id": "trace-1", "X-Client-Subject": "CN=alice", "X-Version": "v2"}},
	} {
		var trusted []netip.Prefix
		if tc.trusted {
			trusted = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		}
		ca := newClientAddrs(client, true, trusted)
		ca.clientCert(&ConnInfo{ClientCertHeader: "X-Client-Subject", ClientSubject: "CN=alice"})
		r := &http.Request{Method: "GET", Host: "shop.example", Header: hdr}
		var fw fwdScratch
		fw.rr = routeRequest{Request: reqview.HTTP{R: r}, v: &reqView{authority: []byte(r.Host), fieldsView: fieldsView{hdr: hdr}}, ca: &ca, fw: &fw}
		for name, want := range tc.want {
			got, ok := fw.rr.Header(name)
			if want == "-" {
				if ok {
					t.Errorf("trusted=%v: %s = %q, want absent", tc.trusted, name, got)
				}
				continue
			}
			if !ok || got != want {
				t.Errorf("trusted=%v: %s = %q (%v), want %q", tc.trusted, name, got, ok, want)
			}
		}
		// The id a condition sees is the one sent.
		id, _ := fw.rr.Header("X-Request-Id")
		out, sent := forwardHeader(hdr, &ca, r.Host, &fw)
		if id != sent || out.Get("X-Request-Id") != sent || (!tc.trusted && len(id) != 32) {
			t.Errorf("trusted=%v: condition saw id %q, sent %q (%q)", tc.trusted, id, sent, out.Values("X-Request-Id"))
		}
	}
}

// BenchmarkRouteRequestForwardedField is a condition on X-Forwarded-For:
// one walk of the request's fields by forwardFields.
func BenchmarkRouteRequestForwardedField(b *testing.B) {
	hdr := http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}, "X-Forwarded-For": {"10.0.0.1"}, "Cookie": {"a=1"}, "X-Version": {"v2"}}
	ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), false, nil)
	r := &http.Request{Method: "GET", Host: "shop.example", Header: hdr}
	var fw fwdScratch
	v := &reqView{authority: []byte(r.Host), fieldsView: fieldsView{hdr: hdr}}
	b.ReportAllocs()
	for b.Loop() {
		// A new request: its first read walks the fields.
		fw.rr = routeRequest{Request: reqview.HTTP{R: r}, v: v, ca: &ca, fw: &fw}
		if v, _ := fw.rr.Header("X-Forwarded-For"); v != "192.0.2.1" {
			b.Fatal(v)
		}
	}
}

// Conditions of many routes on one forwarding field cost one walk of the
// request's fields and one copy: reading it eight times allocates what
// reading it once does, and every read answers the same value.
func TestRouteRequestFieldReadOnce(t *testing.T) {
	hdr := http.Header{"Accept": {"*/*"}, "X-Forwarded-For": {"10.0.0.1"}, "X-Version": {"v2"}}
	ca := newClientAddrs(netip.MustParseAddrPort("192.0.2.1:1234"), true, []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")})
	r := &http.Request{Method: "GET", Host: "shop.example", Header: hdr}
	var fw fwdScratch
	reads := func(n int) float64 {
		return testing.AllocsPerRun(50, func() {
			fw.rr = routeRequest{Request: reqview.HTTP{R: r}, v: &reqView{authority: []byte(r.Host), fieldsView: fieldsView{hdr: hdr}}, ca: &ca, fw: &fw}
			for i := range n {
				name := "X-Forwarded-For"
				if i%2 == 1 {
					name = "x-forwarded-for"
				}
				if v, ok := fw.rr.Header(name); !ok || v != "10.0.0.1, 192.0.2.1" {
					t.Fatalf("read %d: %q %v", i, v, ok)
				}
			}
		})
	}
	if one, eight := reads(1), reads(8); eight != one {
		t.Errorf("eight reads allocate %v times, one %v", eight, one)
	}
}
