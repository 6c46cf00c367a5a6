package main

import (
	"github.com/teapot-lb/teapot-lb/consensus"
	"github.com/teapot-lb/teapot-lb/proxy/certs"
)

// The certificate manager waits for the replicated state to be current
// before it manages a name only when its store offers the barrier.
var _ certs.Current = (*consensus.Node)(nil)
