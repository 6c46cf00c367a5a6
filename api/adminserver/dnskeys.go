package adminserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// DNSKeys is what the host's DNS server offers to roll a signed zone's
// key (proxy/dns.Server).
type DNSKeys interface {
	RollKey(ctx context.Context, zone string, step pb.RollDNSKeyRequest_Step, force bool) (*pb.DNSZoneObservation, error)
}

// WithDNSKeys lets the server roll the keys of the zones that keys signs
// and returns s. Without it RollDNSKey fails with FailedPrecondition.
func (s *Server) WithDNSKeys(keys DNSKeys) *Server {
	s.dnsKeys = keys
	return s
}

// RollDNSKey takes one step of a signed zone's key rollover.
func (s *Server) RollDNSKey(ctx context.Context, req *pb.RollDNSKeyRequest) (*pb.RollDNSKeyResponse, error) {
	if req.GetZone() == "" {
		return nil, status.Error(codes.InvalidArgument, "zone: give the zone whose key to roll, one of serve --dns-dnssec")
	}
	if req.GetStep() == pb.RollDNSKeyRequest_STEP_UNSPECIFIED || pb.RollDNSKeyRequest_Step_name[int32(req.GetStep())] == "" {
		return nil, status.Errorf(codes.InvalidArgument, "step %d: give START, FINISH or CANCEL", req.GetStep())
	}
	if s.dnsKeys == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "this host signs no zone (its DNS is off or serve --dns-dnssec is empty): ask a host that signs %s", api.Excerpt(req.GetZone()))
	}
	ctx, cancel := withDefault(ctx)
	defer cancel()
	if req.GetStep() == pb.RollDNSKeyRequest_STEP_START {
		// A host of an earlier release would go on signing with the old
		// key alone, and answer the new DS's resolvers with nothing valid.
		st, err := s.store.Status(ctx)
		if err != nil {
			return nil, api.ToStatus(fmt.Errorf("key rollover START: the hosts' releases: %w", err))
		}
		for _, n := range st.GetNodes() {
			if n.GetError() == "" && !slices.Contains(n.GetFeatures(), api.FeatureDNSKeyRollover) {
				return nil, status.Errorf(codes.FailedPrecondition, "key rollover START: host %s runs release %s, which signs with one key only: upgrade it first",
					api.Excerpt(n.GetId()), api.Excerpt(n.GetVersion()))
			}
		}
	}
	z, err := s.dnsKeys.RollKey(ctx, req.GetZone(), req.GetStep(), req.GetForce())
	if err != nil {
		return nil, api.ToStatus(fmt.Errorf("key rollover %s: %w", strings.TrimPrefix(req.GetStep().String(), "STEP_"), err))
	}
	return &pb.RollDNSKeyResponse{Zone: z}, nil
}
