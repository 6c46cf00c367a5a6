package translate

import (
	"fmt"
	"slices"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// corsUnsupported says why a CORS filter cannot be served as asked ("" when
// it can): what the LB cluster's validation would refuse, so that the
// route is not accepted instead of the whole Gateway being refused.
func corsUnsupported(c *gwv1.HTTPCORSFilter) string {
	switch {
	case c == nil:
		return "cors is required for a CORS filter"
	case c.MaxAge > api.MaxCORSMaxAge:
		return fmt.Sprintf("cors.maxAge %d is over %d seconds (a day)", c.MaxAge, api.MaxCORSMaxAge)
	case c.AllowCredentials != nil && *c.AllowCredentials && slices.Contains(c.ExposeHeaders, "*"):
		return "cors.exposeHeaders \"*\" with allowCredentials: browsers read \"*\" as a header name there; list the names"
	}
	for i, o := range c.AllowOrigins {
		if why := api.CORSOriginProblem(string(o)); why != "" {
			return fmt.Sprintf("cors.allowOrigins[%d]: %s", i, why)
		}
	}
	return ""
}

// corsFilter translates an HTTPRoute's CORS filter.
func corsFilter(c *gwv1.HTTPCORSFilter) *pb.RouteFilter {
	out := &pb.CORS{AllowCredentials: c.AllowCredentials != nil && *c.AllowCredentials}
	if c.MaxAge > 0 {
		out.MaxAge = uint32(c.MaxAge)
	}
	for _, o := range c.AllowOrigins {
		out.AllowOrigins = append(out.AllowOrigins, string(o))
	}
	for _, m := range c.AllowMethods {
		out.AllowMethods = append(out.AllowMethods, string(m))
	}
	for _, h := range c.AllowHeaders {
		out.AllowHeaders = append(out.AllowHeaders, string(h))
	}
	for _, h := range c.ExposeHeaders {
		out.ExposeHeaders = append(out.ExposeHeaders, string(h))
	}
	return &pb.RouteFilter{Cors: out}
}
