package api

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of validation and allocation. Test with errors.Is.
var (
	// ErrInvalid marks an object that breaks a rule of the model: the
	// operator or tenant has to change the object itself.
	ErrInvalid = errors.New("invalid")
	// ErrConflict marks an object that is well-formed but clashes with the
	// stored state: an address taken, a domain owned by another tenant, an
	// object still in use, a quota reached, a pool exhausted.
	ErrConflict = errors.New("conflict")
	// ErrNotFound marks a reference to an object that does not exist.
	ErrNotFound = errors.New("not found")
)

// FieldError is one broken rule: the field's path inside the object
// ("listeners[1].port", "pools.web.members[0]", "cidrs[2]") and a reason a
// person can act on.
type FieldError struct {
	Field  string
	Reason string
}

// String renders "field: reason", or the reason alone for the whole object.
func (e FieldError) String() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// ValidationError lists every rule an object breaks, in a deterministic
// order (the order of the object's fields, map keys sorted).
type ValidationError struct {
	// Ref names the object: "LoadBalancer acme/shop".
	Ref    string
	Errors []FieldError
	// Conflict is true when the object is well-formed and every error is a
	// clash with the stored state; errors.Is then matches ErrConflict
	// instead of ErrInvalid.
	Conflict bool
}

// maxErrorsShown bounds the one-line message; Errors keeps them all.
const maxErrorsShown = 10

// Error renders one line: "LoadBalancer acme/shop: listeners[1].port: must
// be between 1 and 65535, got 70000; routes[0].host: ...".
func (e *ValidationError) Error() string {
	var b strings.Builder
	if e.Ref != "" {
		b.WriteString(e.Ref)
		b.WriteString(": ")
	}
	if len(e.Errors) == 0 {
		b.WriteString("invalid")
		return b.String()
	}
	for i, fe := range e.Errors {
		if i == maxErrorsShown {
			fmt.Fprintf(&b, "; and %d more", len(e.Errors)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.String())
	}
	return b.String()
}

// Is matches ErrConflict when Conflict is set and ErrInvalid otherwise.
func (e *ValidationError) Is(target error) bool {
	switch target {
	case ErrConflict:
		return e.Conflict
	case ErrInvalid:
		return !e.Conflict
	}
	return false
}

// checker collects field errors while an object is validated.
type checker struct {
	errs     []FieldError
	invalid  bool
	conflict bool
	// rx, when set, memoises and bounds the regular expressions compiled
	// (ValidateLoadBalancer sets it; see regexMemo).
	rx *regexMemo
}

func (c *checker) invalidf(field, format string, args ...any) {
	c.invalid = true
	c.errs = append(c.errs, FieldError{Field: Clip(field, MaxFieldPath), Reason: reasonf(format, args)})
}

func (c *checker) conflictf(field, format string, args ...any) {
	c.conflict = true
	c.errs = append(c.errs, FieldError{Field: Clip(field, MaxFieldPath), Reason: reasonf(format, args)})
}

// add records errs, rules broken found by an exported check.
func (c *checker) add(errs []FieldError) {
	if len(errs) > 0 {
		c.invalid = true
		c.errs = append(c.errs, errs...)
	}
}

func (c *checker) ok() bool { return len(c.errs) == 0 }

// err returns nil when nothing was found, else a *ValidationError.
func (c *checker) err(ref string) error {
	if len(c.errs) == 0 {
		return nil
	}
	return &ValidationError{Ref: ref, Errors: c.errs, Conflict: c.conflict && !c.invalid}
}
