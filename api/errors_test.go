package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestValidationError(t *testing.T) {
	many := make([]FieldError, 12)
	for i := range many {
		many[i] = FieldError{Field: fmt.Sprintf("f%d", i), Reason: "r"}
	}
	tests := []struct {
		name     string
		err      *ValidationError
		want     string
		invalid  bool
		conflict bool
	}{
		{"one", &ValidationError{Ref: "Tenant acme", Errors: []FieldError{{"name", "required"}}}, "Tenant acme: name: required", true, false},
		{"whole object", &ValidationError{Ref: "VIPPool p", Errors: []FieldError{{"", "in use"}}, Conflict: true}, "VIPPool p: in use", false, true},
		{"no ref", &ValidationError{Errors: []FieldError{{"a", "b"}, {"c", "d"}}}, "a: b; c: d", true, false},
		{"empty", &ValidationError{Ref: "Tenant x"}, "Tenant x: invalid", true, false},
		{"truncated", &ValidationError{Ref: "X y", Errors: many}, "X y: f0: r; f1: r; f2: r; f3: r; f4: r; f5: r; f6: r; f7: r; f8: r; f9: r; and 2 more", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			wrapped := fmt.Errorf("apply: %w", tt.err)
			if errors.Is(wrapped, ErrInvalid) != tt.invalid || errors.Is(wrapped, ErrConflict) != tt.conflict {
				t.Errorf("Is: invalid %v conflict %v", errors.Is(wrapped, ErrInvalid), errors.Is(wrapped, ErrConflict))
			}
			if errors.Is(wrapped, ErrNotFound) {
				t.Error("matches ErrNotFound")
			}
		})
	}
}

func TestCheckerMixedErrorsAreInvalid(t *testing.T) {
	// A conflict next to a broken field is reported as invalid: the object
	// has to change either way.
	tenant := acmeTenant()
	tenant.Domains = []string{"other.example", "Bad"}
	err := ValidateTenant(tenant, baseCatalog())
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "domains[0]: domain other.example is owned by tenant other") {
		t.Fatalf("conflict not reported: %v", err)
	}
}
