package pki

import (
	"context"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// FromContext returns the verified identity of a gRPC caller, if it
// presented a certificate signed by the cluster CA.
func FromContext(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Identity{}, false
	}
	id, err := IdentityOf(info.State.VerifiedChains[0][0])
	return id, err == nil
}
