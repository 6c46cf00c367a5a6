package main

import (
	"errors"
	"slices"
	"testing"
)

// TestClosersStopInReverse: the parts stop last started first, each once,
// and the first error is returned.
func TestClosersStopInReverse(t *testing.T) {
	t.Parallel()
	var order []int
	var stack closers
	errFirst, errLater := errors.New("first"), errors.New("later")
	stack.PushFunc(func() { order = append(order, 1) })
	stack.Push(func() error { order = append(order, 2); return errLater })
	stack.Push(func() error { order = append(order, 3); return errFirst })
	if err := stack.Close(); !errors.Is(err, errFirst) {
		t.Errorf("Close = %v, want %v", err, errFirst)
	}
	if err := stack.Close(); err != nil {
		t.Errorf("second Close = %v, want nil: each stop runs once", err)
	}
	if want := []int{3, 2, 1}; !slices.Equal(order, want) {
		t.Errorf("stopped %v, want %v", order, want)
	}
}
