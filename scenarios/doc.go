// Package scenarios holds end-to-end tests and benchmarks that drive the real
// teapot-lb binary as a black box: clusters of several processes on one
// machine, leader failures, and consensus latency and failover measurements.
// It also holds the repository-wide rule tests (dependency rules between the
// top-level packages, package documentation, file sizes).
//
// Run the scenarios with go test ./scenarios and the benchmarks with make bench.
package scenarios
