package l7

import (
	"bytes"
	"io"
	"net/http"
)

// inspect runs the route's Inspect over the request, with the first
// InspectBody bytes of its body read (and given back to the body that is
// sent on). It reports false when Inspect answered the request.
func (s *Server) inspect(w http.ResponseWriter, q *rtRequest, route *Route) bool {
	r := q.r
	var body []byte
	if r.Body != nil && r.Body != http.NoBody && route.InspectBody > 0 {
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, int64(route.InspectBody)))
		if err != nil {
			s.failHTTP(w, q, 400, OutcomeClientError)
			return false
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	}
	h, status, note := route.Inspect(r, body, q.scope.pp.src, q.scope.pp.dst)
	q.stats.Inspected = note
	if h == nil {
		return true
	}
	h.ServeHTTP(w, r)
	q.stats.Status, q.stats.Outcome = status, OutcomeLocal
	return false
}
