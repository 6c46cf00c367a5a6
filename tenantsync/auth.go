package tenantsync

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/pki"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/syncspec"
)

// caller is an authenticated agent.
type caller struct {
	tenant string
	// serial is the hex serial number of its certificate.
	serial string
	// uid is the tenant uid the certificate was issued for ("" for
	// credentials of a tenant created before tenants had uids).
	uid string
}

// authenticate reads the caller's verified client certificate: it must
// carry a tenant identity.
func authenticate(ctx context.Context) (caller, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return caller{}, fmt.Errorf("no peer information: %w", ErrUnauthenticated)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return caller{}, fmt.Errorf("a tenant certificate from the cluster CA is required (teapot-lb tenant credentials NAME): %w", ErrUnauthenticated)
	}
	cert := info.State.VerifiedChains[0][0]
	id, err := pki.IdentityOf(cert)
	if err != nil || id.Role != pki.RoleTenant {
		return caller{}, fmt.Errorf("%s is not a tenant credential: %w", cert.Subject.CommonName, api.ErrForbidden)
	}
	return caller{tenant: id.Name, serial: SerialOf(cert), uid: id.UID}, nil
}

// SerialOf is the form of a certificate's serial number that revocation
// lists hold: lowercase hex.
func SerialOf(cert *x509.Certificate) string { return strings.ToLower(cert.SerialNumber.Text(16)) }

// Revoked returns the serials revoked for t.
func Revoked(t *pb.Tenant) []string { return t.GetRevokedCredentials() }

// admit checks that the caller's tenant exists and its credential is not
// revoked.
func (c caller) admit(t *pb.Tenant) error {
	if t == nil {
		return fmt.Errorf("tenant %s does not exist on this cluster; ask the operator: %w", c.tenant, api.ErrForbidden)
	}
	if c.uid != t.GetUid() {
		return fmt.Errorf("credential %s was issued to an earlier tenant named %s, since deleted; ask the operator for new credentials: %w", c.serial, c.tenant, ErrRevoked)
	}
	if slices.Contains(Revoked(t), c.serial) {
		return fmt.Errorf("credential %s of tenant %s was revoked; ask the operator for new credentials: %w", c.serial, c.tenant, ErrRevoked)
	}
	return nil
}

// hostPorts are the LB hosts' own services (api.HostPorts): a member or
// a health check reaching one of them is refused whatever the tenant's
// networks say.
func hostPorts(objs []*pb.Object) *api.HostPorts {
	hp := api.NewHostPorts(nil)
	for _, o := range objs {
		if n := o.GetNode(); n != nil {
			hp.AddNode(n)
		}
	}
	return hp
}

// sanitize scopes an upserted load balancer to the caller and checks what
// the model's validation cannot know: that the agent manages the name and
// that no member points at an LB host's own services.
func sanitize(tenant string, lb *pb.LoadBalancer, hosts *api.HostPorts) (*pb.LoadBalancer, error) {
	if lb == nil {
		return nil, fmt.Errorf("upsert without a load balancer: %w", api.ErrInvalid)
	}
	if !syncspec.Managed(lb.GetName()) {
		return nil, fmt.Errorf("name %s: the agent manages load balancers named %s* and %s*; others belong to the operator: %w",
			api.Excerpt(lb.GetName()), syncspec.ServicePrefix, syncspec.IngressPrefix, api.ErrForbidden)
	}
	out := &pb.LoadBalancer{
		Name: lb.GetName(), Tenant: tenant, Vip: lb.GetVip(), Listeners: lb.GetListeners(), Routes: lb.GetRoutes(), Pools: lb.GetPools(),
	}
	for _, key := range sortedKeys(out.GetPools()) {
		for i, m := range out.GetPools()[key].GetMembers() {
			ap, err := netip.ParseAddrPort(m.GetAddress())
			if err != nil {
				continue // validation names it
			}
			if why := hosts.Problem(ap, out.GetPools()[key].GetHealthCheck().GetPort()); why != "" {
				return nil, &api.ValidationError{
					Ref: api.RefString(&pb.ObjectRef{Kind: api.KindLoadBalancer, Tenant: tenant, Name: lb.GetName()}),
					Errors: []api.FieldError{{
						Field:  api.Clip(fmt.Sprintf("pools.%s.members[%d]", key, i), api.MaxFieldPath),
						Reason: why,
					}},
				}
			}
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
