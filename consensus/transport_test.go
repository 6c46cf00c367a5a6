package consensus

import (
	"crypto/tls"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestReplicationIsNotPipelined: the Raft transport refuses to pipeline
// AppendEntries, so the leader replicates each follower with one request
// at a time (see newTransport for the pipeline's wedge this avoids).
func TestReplicationIsNotPipelined(t *testing.T) {
	// The transport refuses before it dials: no certificate is needed.
	layer, err := newTLSStreamLayer("127.0.0.1:0", &tls.Config{}, &tls.Config{})
	if err != nil {
		t.Fatal(err)
	}
	trans := newTransport(layer, hclog.NewNullLogger())
	defer trans.Close()
	p, err := trans.AppendEntriesPipeline("n2", raft.ServerAddress(layer.Addr().String()))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("AppendEntriesPipeline: %v; want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
}
