package api

import (
	"fmt"
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// regexRoutesLB is shopLB with n routes whose paths are distinct regular
// expressions of the kind a tenant wrote to make each request costly
// (about 60 instructions each).
func regexRoutesLB(n int, same bool) *pb.LoadBalancer {
	lb := shopLB()
	for i := range n {
		host, k := "rx.acme.example", i
		if same {
			host, k = fmt.Sprintf("rx%d.acme.example", i), 0
		}
		lb.Routes = append(lb.Routes, &pb.Route{Host: host, PathType: "regex", Pool: "web",
			Path: fmt.Sprintf(`/r%d/([a-z0-9]+-)*[a-z0-9]{1,64}(/[a-z]+)*/(x|y|z)+\.v%d$`, k, k)})
	}
	return lb
}

// What validating a load balancer spends on its regular expressions is
// bounded by what it may hold, not by what a tenant writes: over the
// count quota nothing is compiled, over MaxRegexInstsPerLB compiling
// stops, and an expression written many times is compiled once. The test
// reads a package counter, so it does not run in parallel with others.
func TestValidateRegexCompileBound(t *testing.T) {
	raised := acmeTenant()
	raised.Quotas = &pb.Quotas{RegexMatchesPerLb: 5000, RegexMatches: 5000, RoutesPerLb: 5000, Routes: 5000}
	for _, tc := range []struct {
		name        string
		tenant      *pb.Tenant
		lb          *pb.LoadBalancer
		maxCompiles int64
		want        string
	}{
		// Before the bound: 2,000 compiles (each expression twice).
		{"over the count quota", acmeTenant(), regexRoutesLB(1000, false), 0, "regexMatchesPerLb"},
		{"over the instruction budget", raised, regexRoutesLB(1000, false), MaxRegexInstsPerLB / 50, "the rest were not compiled"},
		{"one expression many times", raised, regexRoutesLB(40, true), 1, "instructions together"},
		{"within every bound", acmeTenant(), regexRoutesLB(10, false), 10, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := baseCatalog()
			c.Put(tc.tenant)
			before := regexCompiles.Load()
			err := ValidateLoadBalancer(tc.lb, c)
			n := regexCompiles.Load() - before
			if n > tc.maxCompiles {
				t.Errorf("%d regular expressions compiled, want at most %d", n, tc.maxCompiles)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a refusal naming %q", err, tc.want)
			}
			t.Logf("%d compiled: %v", n, err)
		})
	}
}
