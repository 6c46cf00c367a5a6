// Package promtext writes the Prometheus text exposition format (version
// 0.0.4) series by series, allocating nothing per series: the format of the
// /metrics port, which the large collectors (the data plane's per-listener
// and per-member series, the VIP manager's per-VIP ones) write straight to
// the response. It sits in api because the data plane and the VIP manager
// may import only api; the server itself is proxy/metricsserver.
package promtext
