// Package scenarios holds end-to-end tests and benchmarks that drive the real
// teapot-lb binary as a black box: clusters of several processes on one
// machine, leader failures, and consensus latency and failover measurements.
// It also holds the repository-wide rule tests (dependency rules between the
// top-level packages, package documentation, file sizes).
//
// Run the scenarios with go test ./scenarios and the benchmarks with make bench.
//
// The scenarios run one after another by default: most of them measure time,
// rates or CPU, or flood the host, and a neighbour would disturb them. A
// scenario that mostly waits (for Kubernetes components, a container's boot,
// a token's expiry, ACME renewals) or only builds and checks
// artefacts (the packages, the image), asserts nothing a neighbour could move
// beyond its margins and uses only addresses of its own calls parallelScenario
// (parallel_test.go), which is t.Parallel: the testing package starts these
// after every other top-level scenario has finished, the longest first, at
// most two of them at a time ($TEAPOT_SCENARIO_PARALLEL or -parallel sets
// how many). $TEAPOT_SCENARIOS=parallel runs only these, =alone only the
// others (phase_test.go): make test runs the parallel ones beside the other
// packages' unit tests, then the others with nothing beside them.
// Scenarios that need the same kind
// of lab and leave it usable share it as subtests of one scenario
// (TestRateLimitAcrossECMP).
package scenarios
