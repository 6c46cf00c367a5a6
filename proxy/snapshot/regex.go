package snapshot

import (
	"regexp"
	"strings"

	"github.com/teapot-lb/teapot-lb/api"
)

// Regex is a route's regular expression, compiled once with the
// snapshot, anchored at both ends. What every match starts with (its
// literal prefix) is compared before the engine runs, so a request whose
// path or value cannot match costs a string comparison; an expression
// that is all literal is an equality.
type Regex struct {
	re *regexp.Regexp
	// prefix is what every matching value starts with; literal says the
	// expression matches prefix alone.
	prefix  string
	literal bool
	// insts is the size of the program (api.CompileRouteRegex): with the
	// value's length it bounds what a match costs.
	insts int
}

// compileRegex compiles a route's regular expression within the API's
// bounds (api.CompileRouteRegex: one check for the API and the compile).
func compileRegex(expr string) (*Regex, error) {
	n, err := api.CompileRouteRegex(expr)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		return nil, err
	}
	prefix, complete := re.LiteralPrefix()
	return &Regex{re: re, prefix: prefix, literal: complete, insts: n}, nil
}

// MatchString reports whether the whole of s matches. It does not
// allocate.
func (r *Regex) MatchString(s string) bool {
	if r.literal {
		return s == r.prefix
	}
	if !strings.HasPrefix(s, r.prefix) {
		return false
	}
	return r.re.MatchString(s)
}

// String returns the anchored expression.
func (r *Regex) String() string { return r.re.String() }

// matching is one lookup in a RouteTable: the request's conditions (nil:
// match on host and path alone), and whether regular expressions may run.
type matching struct {
	req Request
	// noRegex stops the lookup where a regular expression would run:
	// blocked is set then, and the lookup returns no route.
	noRegex, blocked bool
}

// regexOK reports whether a regular expression may run; false stops the
// lookup.
func (m *matching) regexOK() bool {
	if m.noRegex {
		m.blocked = true
		return false
	}
	return true
}
