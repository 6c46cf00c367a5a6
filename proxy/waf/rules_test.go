package waf

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/teapot-lb/teapot-lb/api"
)

func TestRulesEngine(t *testing.T) {
	t.Parallel()
	e, err := Rules([]string{`SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`,
		`SecRule ARGS:user "@streq root" "id:1002,phase:2,deny,chain"`, `SecRule REQUEST_METHOD "@streq POST" "t:none"`,
		`SecRule ARGS:json.user "@streq root" "id:1003,phase:2,deny"`})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Evil", "yes")
	if v := e.Inspect(r, nil, client, server, nil); !v.Rejected || v.Status != 403 || RuleList(v.Rules) != "1001" {
		t.Fatalf("X-Evil: %+v", v)
	}
	body := "user=root"
	r = httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if v := e.Inspect(r, []byte(body), client, server, nil); !v.Rejected || RuleList(v.Rules) != "1002" {
		t.Fatalf("chained rule: %+v", v)
	}
	body = `{"user":"root"}`
	r = httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if v := e.Inspect(r, []byte(body), client, server, nil); !v.Rejected || RuleList(v.Rules) != "1003" {
		t.Fatalf("JSON body: %+v", v)
	}
	if v := e.Inspect(httptest.NewRequest("GET", "/?user=root", nil), nil, client, server, nil); v.Rejected || len(v.Rules) != 0 {
		t.Fatalf("ordinary GET: %+v", v)
	}
}

// TestRulesSubsetBuilds: every variable, operator, action and
// transformation the API lets a tenant's rule use builds in Coraza, so a
// list the API accepted never leaves a route failing closed.
func TestRulesSubsetBuilds(t *testing.T) {
	t.Parallel()
	vars, ops, actions, transforms := api.WAFRuleSubset()
	arg := map[string]string{"rx": "^a", "streq": "a", "contains": "a", "containsword": "a", "beginsWith": "a", "endsWith": "a",
		"eq": "1", "ge": "1", "gt": "1", "le": "1", "lt": "1", "pm": "a b", "within": "a b", "strmatch": "a",
		"validateByteRange": "1-255,10", "ipMatch": "192.0.2.0/24,2001:db8::1"}
	id := 1
	var rules []string
	add := func(r string) {
		t.Helper()
		if _, _, err := api.CheckWAFRule(r, false); err != nil {
			t.Fatalf("the API refuses %s: %v", r, err)
		}
		rules = append(rules, r)
		id++
	}
	for _, v := range vars {
		add(fmt.Sprintf(`SecRule %s "@unconditionalMatch" "id:%d,phase:2,pass,nolog"`, v, id))
	}
	for _, o := range ops {
		add(fmt.Sprintf(`SecRule ARGS "@%s %s" "id:%d,phase:2,pass,nolog"`, o, arg[o], id))
	}
	for _, tr := range transforms {
		add(fmt.Sprintf(`SecRule ARGS "@streq a" "id:%d,phase:2,pass,nolog,t:%s"`, id, tr))
	}
	val := map[string]string{"id": "", "phase": "", "msg": ":'m'", "tag": ":'t'", "severity": ":'CRITICAL'", "status": ":403",
		"t": ":none", "logdata": ":'%{MATCHED_VAR}'", "rev": ":'1'", "ver": ":'1'", "maturity": ":'1'", "accuracy": ":'1'",
		"setvar": ":tx.n=+1", "skip": ":1", "chain": ""}
	for _, a := range actions {
		if a == "id" || a == "phase" || a == "chain" {
			continue
		}
		add(fmt.Sprintf(`SecRule ARGS "@streq a" "id:%d,phase:1,%s%s"`, id, a, val[a]))
	}
	add(fmt.Sprintf(`SecRule ARGS "@streq a" "id:%d,phase:1,deny,chain"`, id))
	rules = append(rules, `SecRule REQUEST_METHOD "@streq POST" "t:none"`)
	for _, r := range rules[:len(rules)-2] {
		if _, err := Rules([]string{r}); err != nil {
			t.Errorf("%s: %v", r, err)
		}
	}
	if _, err := Rules(rules[len(rules)-2:]); err != nil {
		t.Errorf("a chain: %v", err)
	}
}
