package waf

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// expensiveRules are 32 rules that each read every argument and header
// through several transformations and a regular expression.
func expensiveRules() []string {
	var rules []string
	for i := range 32 {
		rules = append(rules, fmt.Sprintf(`SecRule ARGS|REQUEST_HEADERS|REQUEST_URI "@rx (?:[a-z]+[0-9]+){3}q%d" "id:%d,phase:1,pass,nolog,t:none,t:urlDecodeUni,t:lowercase,t:compressWhitespace"`, i, 2000+i))
	}
	return rules
}

func TestRulesEngine(t *testing.T) {
	t.Parallel()
	e, err := Rules([]string{`SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`,
		`SecRule ARGS:user "@streq root" "id:1002,phase:2,deny,chain"`, `SecRule REQUEST_METHOD "@streq POST" "t:none"`})
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
	if v := e.Inspect(httptest.NewRequest("GET", "/?user=root", nil), nil, client, server, nil); v.Rejected || len(v.Rules) != 0 {
		t.Fatalf("ordinary GET: %+v", v)
	}
	x, err := Rules(expensiveRules())
	if err != nil {
		t.Fatal(err)
	}
	r = expensiveRequest()
	start := time.Now()
	for range 20 {
		x.Inspect(r, nil, client, server, nil)
	}
	t.Logf("expensive rules: %v a request", time.Since(start)/20)
}

// expensiveRequest has 8 KiB of query arguments.
func expensiveRequest() *http.Request {
	q := strings.Repeat("a=abc123def456ghi789jkl&", 340)
	r := httptest.NewRequest("GET", "/?"+q, nil)
	r.Header.Set("User-Agent", "Mozilla/5.0")
	return r
}
