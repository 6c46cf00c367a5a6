// Package waf inspects HTTP requests with Coraza v3 and the OWASP Core
// Rule Set v4 it embeds (no file or network access: the rules come from
// the binary). One engine is built per paranoia level and mode and shared
// by every route that asks for it: the rules are the same for all tenants,
// and an engine costs tens of megabytes.
package waf

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/types"
)

// ErrBuild: an engine could not be built from the embedded rules.
var ErrBuild = errors.New("waf: build the rule set")

// Config is what a route asks for.
type Config struct {
	// Paranoia is the CRS paranoia level, 1 to 4.
	Paranoia int
	// Block answers a request the rules reject with 403; otherwise the
	// verdict is only reported (detect).
	Block bool
	// MaxBody is how many bytes of a request body are inspected.
	MaxBody int
}

var (
	mu      sync.Mutex
	engines = map[Config]*Engine{}
)

// Engine is one built rule set.
type Engine struct {
	cfg Config
	waf coraza.WAF
}

// Get returns the engine of cfg, building it on first use (a second or
// so of CPU; call it off the request path).
func Get(cfg Config) (*Engine, error) {
	mu.Lock()
	defer mu.Unlock()
	if e := engines[cfg]; e != nil {
		return e, nil
	}
	engine := "On"
	if !cfg.Block {
		engine = "DetectionOnly"
	}
	directives := fmt.Sprintf(`Include @coraza.conf-recommended
Include @crs-setup.conf.example
SecRuleEngine %s
SecRequestBodyAccess On
SecRequestBodyLimit %d
SecRequestBodyInMemoryLimit %d
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyAccess Off
SecAuditEngine Off
SecAction "id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level=%d"
SecAction "id:900001,phase:1,pass,t:none,nolog,setvar:tx.detection_paranoia_level=%d"
Include @owasp_crs/*.conf
`, engine, cfg.MaxBody, cfg.MaxBody, cfg.Paranoia, cfg.Paranoia)
	w, err := coraza.NewWAF(coraza.NewWAFConfig().WithRootFS(coreruleset.FS).WithDirectives(directives))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	e := &Engine{cfg: cfg, waf: w}
	engines[cfg] = e
	return e, nil
}

// inboundAnomaly is the CRS rule that rejects a request whose anomaly
// score reached the threshold.
const inboundAnomaly = 949110

// Verdict is the outcome of one inspection.
type Verdict struct {
	// Blocked: the request must be refused (block mode).
	Blocked bool
	// Status is the status a blocked request gets.
	Status int
	// Rules are the ids of the rules that matched (detect and block).
	Rules []int
	// Rejected: the rules reject the request (its anomaly score reached
	// the threshold, rule 949110), whether or not the mode blocks it.
	Rejected bool
}

// Inspect runs the rules over the request head and body (at most
// MaxBody bytes of it, which the caller read). It does not read r.Body.
func (e *Engine) Inspect(r *http.Request, body []byte, client, server netip.AddrPort) Verdict {
	tx := e.waf.NewTransaction()
	defer func() {
		tx.ProcessLogging()
		tx.Close()
	}()
	tx.ProcessConnection(client.Addr().String(), int(client.Port()), server.Addr().String(), int(server.Port()))
	tx.ProcessURI(r.URL.RequestURI(), r.Method, r.Proto)
	for k, vs := range r.Header {
		for _, v := range vs {
			tx.AddRequestHeader(k, v)
		}
	}
	if r.Host != "" {
		tx.AddRequestHeader("Host", r.Host)
		tx.SetServerName(r.Host)
	}
	if it := tx.ProcessRequestHeaders(); it != nil {
		return e.verdict(tx, it)
	}
	if len(body) > 0 {
		if it, _, err := tx.WriteRequestBody(body); it != nil || err != nil {
			return e.verdict(tx, it)
		}
	}
	it, _ := tx.ProcessRequestBody()
	return e.verdict(tx, it)
}

func (e *Engine) verdict(tx types.Transaction, it *types.Interruption) Verdict {
	var v Verdict
	for _, m := range tx.MatchedRules() {
		if id := m.Rule().ID(); m.Message() == "" || id < 910000 || id >= 980000 {
			continue // flow control, the setup's own actions, reporting
		}
		v.Rules = append(v.Rules, m.Rule().ID())
		v.Rejected = v.Rejected || m.Rule().ID() == inboundAnomaly
	}
	v.Rejected = v.Rejected || it != nil
	if it != nil && e.cfg.Block {
		v.Blocked, v.Status = true, it.Status
		if v.Status == 0 {
			v.Status = http.StatusForbidden
		}
	}
	return v
}

// ReadBody reads at most max bytes of r's body and returns them, with a
// body for r that yields them and then the rest.
func ReadBody(r *http.Request, max int) ([]byte, io.ReadCloser, error) {
	if r.Body == nil || r.Body == http.NoBody || max <= 0 {
		return nil, r.Body, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, int64(max)))
	if err != nil {
		return nil, nil, err
	}
	return buf, struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytesReader(buf), r.Body), r.Body}, nil
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b: b} }

type sliceReader struct{ b []byte }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// RuleList renders rule ids for a log line.
func RuleList(ids []int) string {
	b := make([]byte, 0, 8*len(ids))
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return string(b)
}
