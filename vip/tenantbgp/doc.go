// Package tenantbgp peers with the tenants' own BGP speakers (Calico's
// BIRD, Cilium, MetalLB) from every LB host, accepts what each announces
// only inside what the tenant owns, and installs the accepted routes in
// the host's routing table (an attached tenant's: in its namespace, from
// which its sessions are also made) so that members are dialled straight
// at their pods. Over an attached tenant's sessions it announces the VIPs
// of bgp pools in the tenant's attachment, to that tenant alone. See
// DESIGN.md.
package tenantbgp
