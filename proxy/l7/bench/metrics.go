package main

import (
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/metrics"
)

// recordMetrics makes cfg record into a metrics.Memory, as serve does,
// and renders the Prometheus exposition every second, as a scrape would.
// The returned function stops the scraper.
func recordMetrics(cfg *l7.Config) func() {
	var m metrics.Memory
	cfg.Metrics = &m
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(&m, metrics.CollectorConfig{}))
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mfs, err := reg.Gather()
				if err != nil {
					continue
				}
				enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
				for _, mf := range mfs {
					_ = enc.Encode(mf)
				}
			}
		}
	}()
	return func() { close(done) }
}
