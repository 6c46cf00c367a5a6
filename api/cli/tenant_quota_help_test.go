package cli_test

import (
	"strings"
	"testing"
)

// TestTenantQuotaFlagDefaults: each quota flag of tenant create and
// update says its default as it is: a number every host shares, or for
// --cpu-millicores each host's own (serve --cpu-per-tenant), never "0".
func TestTenantQuotaFlagDefaults(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"create", "update"} {
		r := run(t, newFake(), "", "tenant", cmd, "--help")
		var line string
		for l := range strings.SplitSeq(r.stdout, "\n") {
			if strings.Contains(l, "--cpu-millicores") {
				line = l
			}
		}
		if !strings.Contains(line, "(0: the default, each host's serve --cpu-per-tenant, by default a quarter of its CPUs)") {
			t.Errorf("tenant %s --help: --cpu-millicores says %q", cmd, strings.TrimSpace(line))
		}
		if strings.Contains(r.stdout, "the default, 0)") {
			t.Errorf("tenant %s --help gives a default of 0:\n%s", cmd, r.stdout)
		}
		if !strings.Contains(r.stdout, "(0: the default, 250)") {
			t.Errorf("tenant %s --help: --waf-cpu-millicores lost its default", cmd)
		}
	}
}
