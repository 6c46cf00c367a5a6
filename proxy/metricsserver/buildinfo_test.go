package metricsserver

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBuildInfo: teapot_lb_build_info is one series of 1 naming the
// release, the commit and the Go release.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(BuildInfo("v1.2.3", "abc1234"))
	want := `# HELP teapot_lb_build_info Always 1; the labels name this host's build: version, commit and the Go release.
# TYPE teapot_lb_build_info gauge
teapot_lb_build_info{commit="abc1234",goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "teapot_lb_build_info"); err != nil {
		t.Fatal(err)
	}
}
