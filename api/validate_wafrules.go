package api

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of a route's own WAF rules (waf.rules).
const (
	// MaxWAFRules and MaxWAFRulesBytes bound one route's waf.rules: the
	// rules a tenant's engine runs for each of the route's requests.
	MaxWAFRules      = 32
	MaxWAFRulesBytes = 16 << 10
	// MinTenantRuleID and MaxTenantRuleID are the rule ids a tenant's
	// rules may take: the range the ModSecurity rule id registry keeps
	// for local use, apart from the Core Rule Set's (900000 to 999999).
	MinTenantRuleID = 1
	MaxTenantRuleID = 99999
	// MaxWAFRuleSetsPerLB bounds the distinct waf.rules lists of one load
	// balancer's routes: each distinct list is an engine on every host.
	MaxWAFRuleSetsPerLB = 4
)

// ErrWAFRule: a tenant's WAF rule is outside the allowed subset.
var ErrWAFRule = errors.New("is not an allowed WAF rule")

// wafOperators are the operators a tenant's rule may use: none reads a
// file or the network.
var wafOperators = map[string]bool{
	"rx": true, "streq": true, "contains": true, "beginsWith": true, "endsWith": true,
	"eq": true, "ge": true, "gt": true, "le": true, "lt": true, "pm": true, "within": true,
	"strmatch": true, "detectSQLi": true, "detectXSS": true, "validateByteRange": true,
	"validateUrlEncoding": true, "validateUtf8Encoding": true, "ipMatch": true,
	"unconditionalMatch": true, "noMatch": true,
}

// wafFileOperators read a file or ask the network; they are refused by
// name.
var wafFileOperators = map[string]string{
	"inspectfile": "runs a program", "pmfromfile": "reads a file", "pmf": "reads a file",
	"ipmatchfromfile": "reads a file", "ipmatchf": "reads a file", "rbl": "asks a DNS server",
	"geolookup": "reads a database file", "validateschema": "reads a schema file",
	"pmfromdataset": "reads a data set", "ipmatchfromdataset": "reads a data set",
}

// wafActions are the actions a tenant's rule may use.
var wafActions = map[string]bool{
	"id": true, "phase": true, "msg": true, "tag": true, "severity": true, "log": true,
	"nolog": true, "noauditlog": true, "pass": true, "deny": true,
	"status": true, "t": true, "chain": true, "capture": true,
	"multimatch": true, "logdata": true, "rev": true, "ver": true, "maturity": true,
	"accuracy": true, "setvar": true, "skip": true,
}

// wafForbiddenActions are refused with their reason.
var wafForbiddenActions = map[string]string{
	"exec":      "runs a program",
	"initcol":   "opens a persistent collection",
	"setsid":    "opens a persistent collection",
	"setuid":    "opens a persistent collection",
	"setrsc":    "opens a persistent collection",
	"expirevar": "works on persistent collections",
	"ctl":       "changes the engine's configuration (rules, audit and debug logs)",
	"setenv":    "changes the host process's environment",
	"proxy":     "sends the request to another server",
	"redirect":  "answers for the route's pools",
	"drop":      "closes the connection for the host",
	"allow":     "stops the rules that follow it",
	"auditlog":  "writes the audit log, which LB hosts do not keep (the access log's waf_rules names the rules that matched)",
	"block":     "does what SecDefaultAction says, which a tenant's rules do not set: use deny",
}

// wafVariables are the request variables a tenant's rule may read.
var wafVariables = map[string]bool{
	"ARGS": true, "ARGS_GET": true, "ARGS_POST": true, "ARGS_NAMES": true, "ARGS_GET_NAMES": true,
	"ARGS_POST_NAMES": true, "ARGS_COMBINED_SIZE": true, "REQUEST_HEADERS": true,
	"REQUEST_HEADERS_NAMES": true, "REQUEST_COOKIES": true, "REQUEST_COOKIES_NAMES": true,
	"REQUEST_URI": true, "REQUEST_URI_RAW": true, "REQUEST_LINE": true, "REQUEST_METHOD": true,
	"REQUEST_PROTOCOL": true, "REQUEST_FILENAME": true, "REQUEST_BASENAME": true,
	"REQUEST_BODY": true, "REQUEST_BODY_LENGTH": true, "QUERY_STRING": true, "REMOTE_ADDR": true,
	"REMOTE_PORT": true, "SERVER_NAME": true, "SERVER_ADDR": true, "SERVER_PORT": true,
	"FILES": true, "FILES_NAMES": true, "FILES_SIZES": true, "FILES_COMBINED_SIZE": true,
	"TX": true, "MATCHED_VAR": true, "MATCHED_VARS": true, "MATCHED_VAR_NAME": true,
	"MATCHED_VARS_NAMES": true, "REQBODY_ERROR": true, "REQBODY_PROCESSOR": true,
	"UNIQUE_ID": true,
}

// wafTransforms are the transformations a tenant's rule may use.
var wafTransforms = map[string]bool{
	"none": true, "lowercase": true, "uppercase": true, "urldecode": true, "urldecodeuni": true,
	"htmlentitydecode": true, "compresswhitespace": true, "removewhitespace": true,
	"base64decode": true, "base64decodeext": true, "base64encode": true, "hexdecode": true,
	"hexencode": true, "jsdecode": true, "cssdecode": true, "cmdline": true, "normalisepath": true,
	"normalizepath": true, "normalisepathwin": true, "normalizepathwin": true,
	"removenulls": true, "replacenulls": true, "removecomments": true, "replacecomments": true,
	"sha1": true, "md5": true, "length": true, "trim": true, "trimleft": true, "trimright": true,
	"utf8tounicode": true, "escapeseqdecode": true,
}

// checkWAFRules checks a route's waf.rules: the bounds, each rule in the
// allowed subset, ids unique and in the tenant range, chains closed.
func checkWAFRules(ck *checker, field string, rules []string) {
	if len(rules) > MaxWAFRules {
		ck.invalidf(field, "has %d rules; at most %d (a fixed bound: combine conditions with chain, or use @pm for lists)", len(rules), MaxWAFRules)
		return
	}
	total := 0
	for _, r := range rules {
		total += len(r)
	}
	if total > MaxWAFRulesBytes {
		ck.invalidf(field, "is %d bytes; at most %d (a fixed bound)", total, MaxWAFRulesBytes)
		return
	}
	ids := map[int]int{}
	chained := false // the rule before this one ends with chain
	for i, r := range rules {
		f := fmt.Sprintf("%s[%d]", field, i)
		id, chain, err := CheckWAFRule(r, chained)
		if err != nil {
			ck.invalidf(f, "%v", err)
			return
		}
		if id != 0 {
			if j, dup := ids[id]; dup {
				ck.invalidf(f, "%v: id %d is also rules[%d]'s", ErrWAFRule, id, j)
				return
			}
			ids[id] = i
		}
		chained = chain
	}
	if chained {
		ck.invalidf(fmt.Sprintf("%s[%d]", field, len(rules)-1), "%v: ends with chain and no rule follows it", ErrWAFRule)
	}
}

// CheckWAFRule checks one tenant rule: a SecRule or SecAction from the
// allowed subset. chained says the rule before it ended with chain (so
// this one takes no id or phase). It returns the rule's id and whether
// it chains the next.
func CheckWAFRule(rule string, chained bool) (id int, chain bool, err error) {
	if strings.ContainsAny(rule, "\r\n") {
		return 0, false, fmt.Errorf("%w: a rule is one line", ErrWAFRule)
	}
	words, err := wafWords(rule)
	if err != nil {
		return 0, false, err
	}
	if len(words) == 0 {
		return 0, false, fmt.Errorf("%w: empty", ErrWAFRule)
	}
	var actions string
	switch strings.ToLower(words[0]) {
	case "secrule":
		if len(words) != 4 {
			return 0, false, fmt.Errorf("%w: SecRule takes variables, an operator and actions (%d words)", ErrWAFRule, len(words)-1)
		}
		if err := checkWAFVariables(words[1]); err != nil {
			return 0, false, err
		}
		if err := checkWAFOperator(words[2]); err != nil {
			return 0, false, err
		}
		actions = words[3]
	case "secaction":
		if chained {
			return 0, false, fmt.Errorf("%w: the rule before ends with chain; a chained rule is a SecRule", ErrWAFRule)
		}
		if len(words) != 2 {
			return 0, false, fmt.Errorf("%w: SecAction takes one list of actions (%d words)", ErrWAFRule, len(words)-1)
		}
		actions = words[1]
	default:
		return 0, false, fmt.Errorf("%w: the directive %s is not one of SecRule, SecAction (no Include, SecRuleRemove*, logs, data directories or engine settings)", ErrWAFRule, Excerpt(cut(words[0], 40)))
	}
	return checkWAFActions(actions, chained)
}

// wafWords splits a rule into its words: double-quoted ones (with
// backslash escapes) or runs of other characters.
func wafWords(s string) ([]string, error) {
	var words []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					if s[j+1] != '"' {
						b.WriteByte('\\')
					}
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("%w: a quote is not closed", ErrWAFRule)
			}
			words = append(words, b.String())
			i = j + 1
		default:
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			words = append(words, s[i:j])
			i = j
		}
	}
	return words, nil
}

func checkWAFVariables(vars string) error {
	for v := range strings.SplitSeq(vars, "|") {
		negated := strings.HasPrefix(v, "!")
		v = strings.TrimLeft(v, "!&")
		name, key, _ := strings.Cut(v, ":")
		if negated && key == "" {
			return fmt.Errorf("%w: !%s excludes nothing; name a key (!%s:name)", ErrWAFRule, Excerpt(cut(name, 40)), Excerpt(cut(name, 40)))
		}
		if !wafVariables[strings.ToUpper(name)] {
			return fmt.Errorf("%w: the variable %s is not one a rule may read (request variables and TX)", ErrWAFRule, Excerpt(cut(name, 40)))
		}
		if len(key) > 1 && key[0] == '/' && key[len(key)-1] == '/' {
			if _, err := CompileRouteRegex(key[1 : len(key)-1]); err != nil {
				return fmt.Errorf("%w: the key of %s %w", ErrWAFRule, name, err)
			}
		}
	}
	return nil
}

func checkWAFOperator(op string) error {
	op = strings.TrimPrefix(op, "!")
	name, arg := "rx", op
	if strings.HasPrefix(op, "@") {
		name, arg, _ = strings.Cut(op[1:], " ")
	}
	if why, bad := wafFileOperators[strings.ToLower(name)]; bad {
		return fmt.Errorf("%w: the operator @%s %s", ErrWAFRule, name, why)
	}
	if !wafOperators[name] {
		for known := range wafOperators {
			if strings.EqualFold(known, name) {
				return fmt.Errorf("%w: the operator is spelled @%s", ErrWAFRule, known)
			}
		}
		return fmt.Errorf("%w: the operator @%s is not in the allowed subset", ErrWAFRule, Excerpt(cut(name, 40)))
	}
	switch name {
	case "detectSQLi", "detectXSS", "unconditionalMatch", "noMatch", "validateUrlEncoding", "validateUtf8Encoding":
		return nil
	}
	if strings.TrimSpace(arg) == "" {
		return fmt.Errorf("%w: the operator @%s takes an argument", ErrWAFRule, name)
	}
	switch name {
	case "rx":
		if _, err := CompileRouteRegex(arg); err != nil {
			return fmt.Errorf("%w: its @rx %w", ErrWAFRule, err)
		}
	case "ipMatch":
		for a := range strings.SplitSeq(arg, ",") {
			if _, err := ParseSource(strings.TrimSpace(a)); err != nil {
				return fmt.Errorf("%w: @ipMatch takes addresses and CIDRs separated by commas; %s is not one", ErrWAFRule, Excerpt(cut(a, 60)))
			}
		}
	case "validateByteRange":
		for rg := range strings.SplitSeq(arg, ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(rg), "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || l < 0 || h > 255 || l > h {
				return fmt.Errorf("%w: @validateByteRange takes bytes and ranges (0-255) separated by commas; %s is not one", ErrWAFRule, Excerpt(cut(rg, 60)))
			}
		}
	}
	return nil
}

// wafActionList splits actions at the commas outside single quotes.
func wafActionList(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

func checkWAFActions(actions string, chained bool) (id int, chain bool, err error) {
	for _, a := range wafActionList(actions) {
		if a == "" {
			continue
		}
		name, val, _ := strings.Cut(a, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		val = strings.Trim(strings.TrimSpace(val), "'")
		if why, bad := wafForbiddenActions[name]; bad {
			return 0, false, fmt.Errorf("%w: the action %s %s", ErrWAFRule, name, why)
		}
		if !wafActions[name] {
			return 0, false, fmt.Errorf("%w: the action %s is not in the allowed subset", ErrWAFRule, Excerpt(cut(name, 40)))
		}
		switch name {
		case "id":
			n, err := strconv.Atoi(val)
			if err != nil || n < MinTenantRuleID || n > MaxTenantRuleID {
				return 0, false, fmt.Errorf("%w: id %s; a tenant's rule ids are %d to %d", ErrWAFRule, Excerpt(cut(val, 20)), MinTenantRuleID, MaxTenantRuleID)
			}
			id = n
		case "phase":
			if val != "1" && val != "2" && val != "request" {
				return 0, false, fmt.Errorf("%w: phase %s; the WAF inspects requests only: phase 1 (headers) or 2 (body)", ErrWAFRule, Excerpt(cut(val, 20)))
			}
		case "t":
			if !wafTransforms[strings.ToLower(val)] {
				return 0, false, fmt.Errorf("%w: the transformation %s is not in the allowed subset", ErrWAFRule, Excerpt(cut(val, 40)))
			}
		case "setvar":
			if v := strings.ToLower(strings.TrimPrefix(val, "!")); !strings.HasPrefix(v, "tx.") {
				return 0, false, fmt.Errorf("%w: setvar %s; a rule sets TX variables only (tx.name)", ErrWAFRule, Excerpt(cut(val, 40)))
			}
		case "chain":
			chain = true
		}
	}
	if chained && id != 0 {
		return 0, false, fmt.Errorf("%w: a chained rule takes no id (the rule before ends with chain)", ErrWAFRule)
	}
	if !chained && id == 0 {
		return 0, false, fmt.Errorf("%w: no id; a tenant's rule ids are %d to %d", ErrWAFRule, MinTenantRuleID, MaxTenantRuleID)
	}
	return id, chain, nil
}

// checkWAFRuleSets bounds the distinct waf.rules lists of a load
// balancer's routes (MaxWAFRuleSetsPerLB).
func checkWAFRuleSets(ck *checker, routes []*pb.Route) {
	sets := map[string]bool{}
	for i, r := range routes {
		rules := r.GetWaf().GetRules()
		if len(rules) == 0 {
			continue
		}
		sets[strings.Join(rules, "\n")] = true
		if len(sets) > MaxWAFRuleSetsPerLB {
			ck.invalidf(fmt.Sprintf("routes[%d].waf.rules", i), "makes %d distinct lists of rules; a load balancer's routes have at most %d (a fixed bound: give routes the same list, each list is an engine on every host)", len(sets), MaxWAFRuleSetsPerLB)
			return
		}
	}
}

// WAFRuleSubset lists what a tenant's WAF rule may use: variables,
// operators, actions and transformations (the operators as Coraza spells them; actions and transformations in
// lower case, as Coraza takes them in any case).
func WAFRuleSubset() (variables, operators, actions, transforms []string) {
	keys := func(m map[string]bool) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	return keys(wafVariables), keys(wafOperators), keys(wafActions), keys(wafTransforms)
}
