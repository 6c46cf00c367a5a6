package l7

import (
	"maps"
	"net/http"
	"slices"
)

// The response side of the one form between the codecs: a member's
// response head, whatever its protocol, is a fieldsView, and
// responseFields decides once which of its fields the client receives;
// each codec only serialises them (an HTTP/1.1 head, an HPACK block,
// net/http values). The trailer section is filtered by trailerKept, as a
// request's is.

// respScratch holds what responseFields uses for one response: the view
// of the member's head (v, for a caller that keeps it here), the iterator
// and field it walks the member's fields with (see fwdScratch), and the
// Trailer field it rewrites.
type respScratch struct {
	v  fieldsView
	it fieldIter
	f  viewField
	tf viewField
	tr []byte
}

// responseFields decides the fields of a member's response head v that
// the client receives, the same for every codec and member protocol, and
// hands them to s. The member's fields go on as they came, except:
//   - the hop-by-hop ones (RFC 9110 section 7.6.1: Connection,
//     Keep-Alive, Proxy-Connection, TE, Upgrade, HTTP2-Settings; a 101
//     is a tunnel and never comes here) and Proxy-Authenticate, which
//     asks the proxy for credentials (section 11.7.1);
//   - those the member's Connection fields name (Content-Length and
//     Transfer-Encoding excepted), and a Content-Length the HTTP/1.x
//     parser dropped (a duplicate, or beside Transfer-Encoding);
//   - Transfer-Encoding, unless keepTE: the codec relays the member's
//     own chunked framing;
//   - the member's Alt-Svc when the listener sets its own (altSvc): a
//     client takes one, and the listener's names what it serves;
//   - in the Trailer field, the names trailerKept drops: the trailer
//     section will not carry them (the field goes when none is left).
//
// Then comes the listener's Alt-Svc. It returns false, for a response
// the client must not get (502), when the member's Connection fields
// have more than maxConnTokens elements (net/http values only: the
// HTTP/1.x parser refuses such a head itself). A route's response-header
// edits are applied after it, on the net/http path (editWriter), and that
// path's writers remove the hop-by-hop fields again after them.
func responseFields(v *fieldsView, altSvc string, keepTE bool, s fieldSink, rs *respScratch) bool {
	it, f := &rs.it, &rs.f
	v.fields(it)
	if it.over {
		return false
	}
	// The HTTP/1.x lines come in runs to a sink of lines, unless the
	// listener sets its own Alt-Svc (of kind hOther, in a run).
	_, lines := s.(*h1Sink)
	it.runs = lines && altSvc == ""
	for it.next(f) {
		switch f.kind {
		case hConnection, hKeepAlive, hProxyConnection, hTE, hUpgrade, hHTTP2Settings, hProxyAuthenticate:
			continue
		case hTransferEncoding:
			if !keepTE {
				continue
			}
		case hTrailer:
			if f.listed {
				continue // hop-by-hop: not rewritten for the client
			}
			var all bool
			rs.tr, all = keptTrailerNames(rs.tr[:0], f.value, it.names)
			if !all {
				if len(rs.tr) > 0 {
					rs.tf = viewField{name: f.name, value: rs.tr, kind: hTrailer}
					s.client(&rs.tf)
				}
				continue
			}
		}
		if f.listed || (altSvc != "" && eqFold(f.name, "alt-svc")) {
			continue
		}
		s.client(f)
	}
	if altSvc != "" {
		s.add("Alt-Svc", unsafeBytes(altSvc))
	}
	return true
}

// keptTrailerNames appends to dst the names of the Trailer field value v
// that trailerKept keeps, comma-separated, and reports whether it kept
// them all (as written).
func keptTrailerNames(dst, v, listed []byte) ([]byte, bool) {
	all := true
	for len(v) > 0 {
		var t []byte
		t, v = nextToken(v)
		if len(t) == 0 {
			continue
		}
		if !trailerKept(t, "", listed) {
			all = false
			continue
		}
		if len(dst) > 0 {
			dst = append(dst, ", "...)
		}
		dst = append(dst, t...)
	}
	return dst, all
}

// respHeader fills h, a net/http writer's fields, with the fields of the
// member's response resp that the client receives (responseFields), the
// Trailer field naming the trailers resp announced that trailerKept
// keeps; false: the response must not be relayed. The listener's Alt-Svc
// is the writer's (h1Writer, h2Stream).
func respHeader(h http.Header, resp *http.Response) bool {
	var rs respScratch
	rs.v.hdr = resp.Header
	if !responseFields(&rs.v, "", false, headerSink{h}, &rs) {
		return false
	}
	delete(h, "Trailer")
	for _, k := range slices.Sorted(maps.Keys(resp.Trailer)) {
		if trailerKept(unsafeBytes(k), "", rs.it.names) {
			h["Trailer"] = append(h["Trailer"], k)
		}
	}
	return true
}

// connNames returns the names the Connection fields of net/http values
// list, as connList.names holds them (at most maxConnTokens elements are
// read).
func connNames(h http.Header) []byte {
	var it fieldIter
	n := 0
	for _, cv := range h["Connection"] {
		it.addConn(cv, &n)
	}
	return it.names
}

// filterRespTrailer deletes the fields of a member's response trailers
// (net/http values) that trailerKept does not keep; hdr is the
// response's head, whose Connection fields name more.
func filterRespTrailer(tr, hdr http.Header) {
	listed := connNames(hdr)
	for k := range tr {
		if !trailerKept(unsafeBytes(k), "", listed) {
			delete(tr, k)
		}
	}
}
