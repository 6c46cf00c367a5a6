package translate_test

import (
	"slices"
	"strings"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// TestGatewayMisdirectedRequests: the https listeners of one port with
// distinct hostnames become the LB listener's sniScopes (421 for a
// request of another listener's hostname on a connection opened for
// one); a port with one hostname gets none; an LB cluster below the
// feature gets a warning and no scopes.
func TestGatewayMisdirectedRequests(t *testing.T) {
	t.Parallel()
	https := func(name string, port int32, host string) gwv1.Listener {
		l := listener(name, gwv1.HTTPSProtocolType, port, host)
		l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "shop-tls"}}}
		return l
	}
	gw := gateway("shop", "gw",
		https("any", 443, ""),
		https("second", 443, "second.acme.example"),
		https("wild", 443, "*.wild.acme.example"),
		https("fourth", 443, "fourth.wild.acme.example"),
		https("alone", 8443, "alone.acme.example"),
		listener("http", gwv1.HTTPProtocolType, 80, ""),
	)
	src := gwSources(t, backendObjs(tlsSecret(t, "shop", "shop-tls")), gwClass("teapot", translate.GatewayController), gw)
	for _, on := range []bool{true, false} {
		o := gwOpts
		o.NotFoundRoutes, o.MisdirectedRequests = true, on
		d := translate.Gateway(gw, src, o)
		if d.Refused != "" {
			t.Fatalf("refused: %s", d.Refused)
		}
		got := map[uint32][]string{}
		for _, l := range d.LB.GetListeners() {
			if sc := l.GetTls().GetSniScopes(); sc != nil {
				got[l.GetPort()] = sc
			}
		}
		warned := slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, "without misdirected-request detection") })
		if !on {
			if len(got) != 0 || !warned {
				t.Errorf("below the feature: scopes %v, warnings %q; want none and a warning", got, d.Warnings)
			}
			continue
		}
		want := []string{"", "*.wild.acme.example", "fourth.wild.acme.example", "second.acme.example"}
		if len(got) != 1 || !slices.Equal(got[443], want) || warned {
			t.Errorf("scopes %v (warnings %q), want port 443: %q only", got, d.Warnings, want)
		}
	}
}
