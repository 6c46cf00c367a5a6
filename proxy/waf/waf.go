// Package waf inspects HTTP requests with Coraza v3 and the OWASP Core
// Rule Set v4 it embeds (no file or network access: the rules come from
// the binary). One engine is built per paranoia level (at most four) and
// shared by every route that asks for it: the rules are the same for all
// tenants, and an engine costs megabytes. Whether a rejected request is
// blocked (block) or only reported (detect) is the route's choice, made
// with the verdict. A tenant's own rules (Rules) get an engine of their
// own, without the Core Rule Set, run after it.
package waf

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/types"
)

// ErrBuild: an engine could not be built from the embedded rules.
var ErrBuild = errors.New("waf: build the rule set")

// MaxBody bounds the body bytes an engine takes (the caller reads at most
// its route's bound, which the API keeps under this).
const MaxBody = 1 << 20

var (
	mu      sync.Mutex
	engines = map[int]*Engine{}
)

// Engine is one built rule set.
type Engine struct {
	waf coraza.WAF
	// own: the engine runs a tenant's own rules (Rules), whose every
	// matched rule is reported and whose interruption rejects.
	own bool
}

// Rules builds an engine of a tenant's own rules alone (SecRule and
// SecAction lines the API checked against its allowed subset), without
// the Core Rule Set: it costs what its rules cost, not the set's 20 MiB.
// A JSON body's fields are ARGS named json.<path>, as with the Core Rule
// Set (rule 200001, outside the tenants' ids, sets the body processor).
// Call it off the request path (a snapshot's compile).
func Rules(rules []string) (*Engine, error) {
	directives := fmt.Sprintf(`SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimit %d
SecRequestBodyInMemoryLimit %d
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyAccess Off
SecAuditEngine Off
SecRule REQUEST_HEADERS:Content-Type "@rx ^application/json" "id:200001,phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
%s
`, MaxBody, MaxBody, strings.Join(rules, "\n"))
	w, err := coraza.NewWAF(coraza.NewWAFConfig().WithDirectives(directives))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	return &Engine{waf: w, own: true}, nil
}

// Built reports whether the engine of a paranoia level is built (Get
// returns it at once).
func Built(paranoia int) bool {
	mu.Lock()
	defer mu.Unlock()
	return engines[paranoia] != nil
}

// Get returns the engine of a paranoia level (1 to 4), building it on
// first use (about 170 ms of CPU; call it off the request path).
func Get(paranoia int) (*Engine, error) {
	if paranoia < 1 || paranoia > 4 {
		return nil, fmt.Errorf("%w: paranoia level %d is not 1 to 4", ErrBuild, paranoia)
	}
	mu.Lock()
	defer mu.Unlock()
	if e := engines[paranoia]; e != nil {
		return e, nil
	}
	directives := fmt.Sprintf(`Include @coraza.conf-recommended
Include @crs-setup.conf.example
SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimit %d
SecRequestBodyInMemoryLimit %d
SecRequestBodyLimitAction ProcessPartial
SecResponseBodyAccess Off
SecAuditEngine Off
SecAction "id:900000,phase:1,pass,t:none,nolog,setvar:tx.blocking_paranoia_level=%d"
SecAction "id:900001,phase:1,pass,t:none,nolog,setvar:tx.detection_paranoia_level=%d"
Include @owasp_crs/*.conf
`, MaxBody, MaxBody, paranoia, paranoia)
	w, err := coraza.NewWAF(coraza.NewWAFConfig().WithRootFS(coreruleset.FS).WithDirectives(directives))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	e := &Engine{waf: w}
	engines[paranoia] = e
	return e, nil
}

// inboundAnomaly is the CRS rule that rejects a request whose anomaly
// score reached the threshold.
const inboundAnomaly = 949110

// Verdict is the outcome of one inspection.
type Verdict struct {
	// Status is the status a rejected request gets when it is blocked.
	Status int
	// Rules are the ids of the rules that matched (detect and block).
	Rules []int
	// Rejected: the rules reject the request (its anomaly score reached
	// the threshold, rule 949110), whether or not the mode blocks it.
	Rejected bool
}

// ruleRemover is the transaction method that skips a rule (Coraza's
// transactions have it; its public interface does not list it).
type ruleRemover interface{ RemoveRuleByID(id int) }

// ParseExclusions reads a comma-separated list of rule ids (as a route's
// spec keeps them).
func ParseExclusions(s string) []int {
	var ids []int
	for f := range strings.SplitSeq(s, ",") {
		if id, err := strconv.Atoi(f); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Inspect runs the rules, but those of exclude, over the request head
// and body (at most MaxBody bytes of it, which the caller read). It does
// not read r.Body.
func (e *Engine) Inspect(r *http.Request, body []byte, client, server netip.AddrPort, exclude []int) Verdict {
	tx := e.waf.NewTransaction()
	defer func() {
		tx.ProcessLogging()
		tx.Close()
	}()
	if len(exclude) > 0 {
		rm, ok := tx.(ruleRemover)
		if !ok {
			// Fail closed: serving with rules the route excluded would
			// block what the tenant let through, not let through more.
			return Verdict{Status: http.StatusServiceUnavailable, Rejected: true}
		}
		for _, id := range exclude {
			rm.RemoveRuleByID(id)
		}
	}
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
		if id := m.Rule().ID(); e.own {
			if id < 1 || id > 99999 || (m.Message() == "" && (it == nil || it.RuleID != id)) {
				continue // the engine's own setup, bookkeeping without msg
			}
		} else if m.Message() == "" || id < 910000 || id >= 980000 {
			continue // flow control, the setup's own actions, reporting
		}
		v.Rules = append(v.Rules, m.Rule().ID())
		v.Rejected = v.Rejected || m.Rule().ID() == inboundAnomaly
	}
	v.Rejected = v.Rejected || it != nil
	if v.Rejected {
		v.Status = http.StatusForbidden
		if it != nil && it.Status != 0 {
			v.Status = it.Status
		}
	}
	return v
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
