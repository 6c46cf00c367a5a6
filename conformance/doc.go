// Package conformance runs the Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version go.mod pins) against
// teapot-lb: the GatewayClass of the agent's controller on a tenant
// cluster whose agent streams to a cluster of LB hosts.
//
// It is a module of its own so that the suite's dependencies
// (controller-runtime among them) stay out of the appliance's module. The
// scenario TestGatewayAPIConformance in scenarios (make conformance)
// starts the tenant cluster and the LB hosts, builds the suite's backend
// image from this module's echo-basic tool, compiles this package's test
// and runs it inside the lab's client network namespace, where the
// Gateways' VIPs and the API server are reachable.
//
// The test reads the cluster from KUBECONFIG and takes the suite's own
// flags (-report-output, -usable-address, -unusable-address, -run-test,
// -skip-tests ...); the profiles and the features teapot-lb claims are
// in this package, so that the claim and the report come from one place.
package conformance
