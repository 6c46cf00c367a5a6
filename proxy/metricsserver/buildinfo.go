package metricsserver

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo returns the collector of teapot_lb_build_info: one series of
// value 1 whose labels name the release (version, commit) and the Go
// release it was built with, so that an alert or a dashboard can tell
// which hosts run which build.
func BuildInfo(version, commit string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "teapot_lb_build_info",
		Help:        "Always 1; the labels name this host's build: version, commit and the Go release.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
