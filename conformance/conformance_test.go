package conformance

import (
	"os"
	"testing"

	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// GatewayClassName is the GatewayClass the scenario creates for the
// agent's controller.
const GatewayClassName = "teapot-lb"

// profiles are the conformance profiles teapot-lb runs: every route kind
// of the Gateway API.
var profiles = []suite.ConformanceProfileName{
	suite.GatewayHTTPConformanceProfileName,
	suite.GatewayGRPCConformanceProfileName,
	suite.GatewayTLSConformanceProfileName,
	suite.GatewayTCPConformanceProfileName,
	suite.GatewayUDPConformanceProfileName,
}

// extended are the extended features teapot-lb claims on top of the
// profiles' core features; the suite runs their tests and the report
// lists them.
var extended = []features.FeatureName{
	features.SupportGatewayPort8080,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportGRPCRouteNamedRouteRule,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteBackendProtocolWebSocket,
	features.SupportGatewayStaticAddresses,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayAddressEmpty,
	features.SupportHTTPRouteCORS,
	features.SupportGatewayFrontendClientCertificateValidation,
	features.SupportGatewayFrontendClientCertificateValidationInsecureFallback,
	features.SupportHTTPRouteRetry,
	features.SupportHTTPRouteRetryBackendTimeout,
	features.SupportHTTPRouteRetryConnectionError,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRouteDestinationPortMatching,
	features.SupportBackendTLSPolicy,
	features.SupportBackendTLSPolicySANValidation,
	features.SupportGatewayBackendClientCertificate,
	features.SupportTLSRouteModeTerminate,
	features.SupportTLSRouteModeMixed,
	features.SupportListenerSet,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	features.SupportGatewayInfrastructure,
}

// skipped are the tests of the profiles' core that teapot-lb does not
// pass, and why; the suite skips them and the report lists them.
var skipped = map[string]string{}

// TestGatewayAPIConformance runs the suite with teapot-lb's profiles and
// features, writing the report where -report-output says.
func TestGatewayAPIConformance(t *testing.T) {
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("KUBECONFIG is not set: the suite runs against a tenant cluster; make conformance starts one")
	}
	opts := conformance.DefaultOptions(t)
	if opts.GatewayClassName == "" || opts.GatewayClassName == "gateway-conformance" {
		opts.GatewayClassName = GatewayClassName
	}
	opts.ConformanceProfiles = profiles
	if len(opts.SupportedFeatures) == 0 {
		opts.SupportedFeatures = extended
	}
	for name, why := range skipped {
		t.Logf("skipping %s: %s", name, why)
		opts.SkipTests = append(opts.SkipTests, name)
	}
	opts.Implementation.Organization = "teapot-lb"
	opts.Implementation.Project = "teapot-lb"
	opts.Implementation.URL = "https://github.com/teapot-lb/teapot-lb"
	if len(opts.Implementation.Contact) == 0 {
		opts.Implementation.Contact = []string{"https://github.com/teapot-lb/teapot-lb/issues"}
	}
	if opts.Implementation.Version == "" {
		opts.Implementation.Version = "dev"
	}
	conformance.RunConformanceWithOptions(t, opts)
}
