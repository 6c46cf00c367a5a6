package main

// closers stops the parts of serve in the reverse of the order they
// started: each part pushes its stop once it runs, and Close runs them
// last first, whether serve returns early on an error or at the end.
type closers []func() error

// Push adds the stop of a part that has started.
func (c *closers) Push(stop func() error) { *c = append(*c, stop) }

// PushFunc adds a stop that cannot fail.
func (c *closers) PushFunc(stop func()) { c.Push(func() error { stop(); return nil }) }

// Close runs the stops, the last pushed first, once each, and returns the
// first error.
func (c *closers) Close() error {
	var first error
	for len(*c) > 0 {
		stop := (*c)[len(*c)-1]
		*c = (*c)[:len(*c)-1]
		if err := stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
