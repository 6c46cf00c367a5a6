package certs

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestNotAfterTimestamp: an issued certificate has its expiry as a Unix
// time, so that an alert compares it with time() whatever the scrape's
// age; one never issued (no notAfter) has no series, rather than 1970.
func TestNotAfterTimestamp(t *testing.T) {
	t.Parallel()
	notAfter := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	m := &Manager{}
	m.latest.Store(&desired{status: map[string]*pb.Certificate{
		"acme/shop":    {Tenant: "acme", Name: "shop", Source: SourceUploaded, State: StateValid, NotAfter: timestamppb.New(notAfter)},
		"acme/pending": {Tenant: "acme", Name: "pending", Source: SourceACME, State: StatePending},
	}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collector())
	want := `# HELP teapot_lb_certificate_not_after_timestamp_seconds Unix time at which a certificate expires; time() subtracted from it is the time left.
# TYPE teapot_lb_certificate_not_after_timestamp_seconds gauge
teapot_lb_certificate_not_after_timestamp_seconds{name="shop",source="uploaded",tenant="acme"} 1.893553445e+09
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "teapot_lb_certificate_not_after_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
}
