package api

import (
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkNotFoundRoute checks a route with notFound: it answers 404 itself,
// so whatever would send, change or limit its requests is refused rather
// than left unused.
func checkNotFoundRoute(ck *checker, f string, r *pb.Route) {
	for _, x := range []struct {
		field string
		set   bool
	}{
		{"pool", r.GetPool() != ""}, {"backends", len(r.GetBackends()) > 0}, {"filters", len(r.GetFilters()) > 0},
		{"matches", len(r.GetMatches()) > 0}, {"timeouts", r.GetTimeouts() != nil}, {"rateLimit", r.GetRateLimit() != nil},
		{"waf", r.GetWaf() != nil}, {"retry", r.GetRetry() != nil},
	} {
		if x.set {
			ck.invalidf(f+"."+x.field, "leave it out with notFound, which answers every request of the route with 404 itself")
		}
	}
}
