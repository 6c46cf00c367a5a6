package api

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// TestWAFRulesRefusedOutsideTheSubset: each class of forbidden directive,
// operator and action is refused naming the rule's index, and ordinary
// rules pass.
func TestWAFRulesRefusedOutsideTheSubset(t *testing.T) {
	t.Parallel()
	ok := `SecRule REQUEST_HEADERS:X-Evil "@streq yes" "id:1001,phase:1,deny,status:403,log,msg:'evil header'"`
	tests := []struct {
		name, rule string
		want       expect
	}{
		{"secrule", ok, pass()},
		{"secaction and chain", `SecAction "id:1002,phase:1,pass,nolog,setvar:tx.score=0"`, pass()},
		{"rx with transforms", `SecRule ARGS|REQUEST_URI "@rx ^/admin(/|$)" "id:1003,phase:2,t:none,t:lowercase,deny,msg:'admin'"`, pass()},
		{"include", `Include /etc/passwd`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"rule remove", `SecRuleRemoveById 942100`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"audit log", `SecAuditLog /tmp/x`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"debug log", `SecDebugLog /tmp/x`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"data dir", `SecDataDir /tmp`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"engine off", `SecRuleEngine Off`, bad("routes[0].waf.rules[1]", "not one of SecRule, SecAction")},
		{"inspectFile", `SecRule FILES "@inspectFile /bin/sh" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "@inspectFile runs a program")},
		{"pmFromFile", `SecRule ARGS "@pmFromFile /etc/passwd" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "@pmFromFile reads a file")},
		{"ipMatchFromFile", `SecRule REMOTE_ADDR "@ipMatchFromFile ips.txt" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "reads a file")},
		{"rbl", `SecRule REMOTE_ADDR "@rbl sbl.example" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "asks a DNS server")},
		{"geoLookup", `SecRule REMOTE_ADDR "@geoLookup" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "reads a database file")},
		{"exec", `SecRule ARGS "@streq x" "id:1004,deny,exec:/bin/sh"`, bad("routes[0].waf.rules[1]", "exec runs a program")},
		{"initcol", `SecAction "id:1004,initcol:ip=%{REMOTE_ADDR}"`, bad("routes[0].waf.rules[1]", "persistent collection")},
		{"setsid", `SecAction "id:1004,setsid:%{REQUEST_COOKIES.s}"`, bad("routes[0].waf.rules[1]", "persistent collection")},
		{"setuid", `SecAction "id:1004,setuid:%{ARGS.u}"`, bad("routes[0].waf.rules[1]", "persistent collection")},
		{"setvar ip", `SecAction "id:1004,setvar:ip.n=+1"`, bad("routes[0].waf.rules[1]", "TX variables only")},
		{"block", `SecRule ARGS "@streq x" "id:1004,block"`, bad("routes[0].waf.rules[1]", "use deny")},
		{"ctl engine off", `SecAction "id:1004,ctl:ruleEngine=Off"`, bad("routes[0].waf.rules[1]", "ctl changes")},
		{"ctl remove", `SecRule ARGS "@streq x" "id:1004,ctl:ruleRemoveById=949110"`, bad("routes[0].waf.rules[1]", "ctl changes")},
		{"id in CRS range", `SecAction "id:942100,pass"`, bad("routes[0].waf.rules[1]", "1 to 99999")},
		{"no id", `SecAction "phase:1,pass"`, bad("routes[0].waf.rules[1]", "no id")},
		{"duplicate id", `SecAction "id:1001,pass"`, bad("routes[0].waf.rules[1]", "also rules[0]'s")},
		{"response phase", `SecRule ARGS "@streq x" "id:1004,phase:4,deny"`, bad("routes[0].waf.rules[1]", "requests only")},
		{"big regex", `SecRule ARGS "@rx a{250}b{250}c{250}d{250}e{20}" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "too big a regular expression")},
		{"bad regex", `SecRule ARGS "@rx (a" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "not a regular expression")},
		{"open chain", `SecRule ARGS "@streq x" "id:1004,deny,chain"`, bad("routes[0].waf.rules[1]", "ends with chain")},
		{"two lines", "SecAction \"id:1004,pass\"\nSecRuleEngine Off", bad("routes[0].waf.rules[1]", "one line")},
		{"operator spelling", `SecRule ARGS "@beginswith a" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "spelled @beginsWith")},
		{"validateSchema", `SecRule REQUEST_BODY "@validateSchema /etc/s.json" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "reads a schema file")},
		{"no argument", `SecRule ARGS "@beginsWith " "id:1004,deny"`, bad("routes[0].waf.rules[1]", "takes an argument")},
		{"bad ipMatch", `SecRule REMOTE_ADDR "@ipMatch 10.0.0.0/8,office" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "\"office\" is not one")},
		{"exclusion without key", `SecRule ARGS|!ARGS "@streq a" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "excludes nothing")},
		{"unknown variable", `SecRule ENV:PATH "@streq x" "id:1004,deny"`, bad("routes[0].waf.rules[1]", "variable \"ENV\"")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb := shopLB()
			rules := []string{ok}
			if tt.rule != ok {
				rules = append(rules, tt.rule)
			}
			lb.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: rules}
			check(t, ValidateLoadBalancer(lb, baseCatalog()), tt.want)
		})
	}
}

func TestWAFRulesBounds(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxWAFRules+1)
	for i := range many {
		many[i] = fmt.Sprintf(`SecAction "id:%d,pass"`, i+1)
	}
	lb := shopLB()
	lb.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: many}
	check(t, ValidateLoadBalancer(lb, baseCatalog()), bad("routes[0].waf.rules", "at most 32"))
	big := `SecRule ARGS "@pm ` + strings.Repeat("word ", MaxWAFRulesBytes/5) + `" "id:1,deny"`
	lb.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: []string{big}}
	check(t, ValidateLoadBalancer(lb, baseCatalog()), bad("routes[0].waf.rules", "at most 16384"))
	lb.Routes[0].Waf = &pb.WAF{Mode: "block", Rules: many[:2]}
	uses := FeaturesUsed(&pb.Object{Kind: &pb.Object_LoadBalancer{LoadBalancer: lb}})
	if len(uses) != 2 || uses[1].Feature != FeatureWAFRules || !strings.HasSuffix(uses[1].Field, "routes[0].waf.rules") || LevelNeeded(uses) != 5 {
		t.Fatalf("uses %v, level %d", uses, LevelNeeded(uses))
	}
}

// TestWAFRuleSetsPerLB: a load balancer's routes have at most
// MaxWAFRuleSetsPerLB distinct lists of rules; routes sharing one list
// count once.
func TestWAFRuleSetsPerLB(t *testing.T) {
	t.Parallel()
	lb := shopLB()
	base := lb.Routes[0]
	lb.Routes = nil
	for i := range MaxWAFRuleSetsPerLB + 1 {
		for j := range 2 {
			r := proto.Clone(base).(*pb.Route)
			r.Path = fmt.Sprintf("/r%d/%d", i, j)
			r.Waf = &pb.WAF{Mode: "block", Rules: []string{fmt.Sprintf(`SecAction "id:%d,pass"`, i+1)}}
			lb.Routes = append(lb.Routes, r)
		}
	}
	check(t, ValidateLoadBalancer(lb, baseCatalog()), bad(fmt.Sprintf("routes[%d].waf.rules", 2*MaxWAFRuleSetsPerLB), "makes 5 distinct lists"))
	lb.Routes = lb.Routes[:2*MaxWAFRuleSetsPerLB]
	check(t, ValidateLoadBalancer(lb, baseCatalog()), pass())
}
