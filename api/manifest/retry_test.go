package manifest

import (
	"strings"
	"testing"
	"time"
)

// An operator writes a route's retry and a backend's request header
// changes in a manifest as the reference names them.
func TestDecodeRouteRetry(t *testing.T) {
	t.Parallel()
	objs, err := Decode(strings.NewReader(`kind: LoadBalancer
name: shop
tenant: acme
listeners: [{ port: 80, protocol: http }]
routes:
  - host: shop.acme.example
    path: /
    backends:
      - { pool: web, requestHeaderModifier: { set: [{ name: X-Pool, value: web }] } }
    retry: { codes: [502, 503], attempts: 3, backoff: 100ms }
pools:
  web: { members: [10.20.0.11:30080] }
`), "shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := objs[0].GetLoadBalancer().GetRoutes()[0]
	rt := r.GetRetry()
	if len(rt.GetCodes()) != 2 || rt.GetCodes()[1] != 503 || rt.GetAttempts() != 3 || rt.GetBackoff().AsDuration() != 100*time.Millisecond {
		t.Errorf("retry %v", rt)
	}
	if m := r.GetBackends()[0].GetRequestHeaderModifier(); len(m.GetSet()) != 1 || m.GetSet()[0].GetName() != "X-Pool" {
		t.Errorf("backend requestHeaderModifier %v", m)
	}
}
