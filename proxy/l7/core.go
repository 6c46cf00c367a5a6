package l7

import (
	"io"
	"net/http"
)

// What the codecs share of serving a request, so that a behaviour is
// written once: local answers and their figures.

// serveLocal answers a request with a route's own handler (a local
// Handler, a Gate's refusal) on the net/http path of every protocol,
// recording in stats the status and body bytes it wrote, as a member's
// response would be.
func serveLocal(w http.ResponseWriter, r *http.Request, h http.Handler, stats *RequestStats) {
	lw := localWriter{ResponseWriter: w}
	h.ServeHTTP(&lw, r)
	if lw.status == 0 {
		lw.status = http.StatusOK
	}
	stats.Status, stats.Outcome, stats.ResponseBytes = lw.status, OutcomeLocal, lw.n
}

// localWriter counts what a local handler writes.
type localWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *localWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *localWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the codec's writer.
func (w *localWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countedBody counts the bytes a handler reads of a request body, for
// RequestStats.RequestBytes on the net/http path of HTTP/2 and HTTP/3
// (HTTP/1.x counts in its own body reader).
type countedBody struct {
	io.ReadCloser
	n int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}
