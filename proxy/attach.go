package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/proxy/l7"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// Attachments dials the members of tenants whose networks are attached
// to the host through a network namespace of their own (vip/attach):
// their member connections, health checks and PROXY protocol connections
// are made from inside it, so tenants may reuse each other's addresses.
type Attachments interface {
	// Attached reports whether tenant has an attachment; the members of
	// one are dialled through DialContext only.
	Attached(tenant string) bool
	// DialContext dials addr as d would, from tenant's namespace; it
	// fails when the attachment is not up on this host (never falling
	// back to the host's routing table).
	DialContext(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error)
	// InNamespace runs fn on a thread inside tenant's namespace, so that
	// the sockets fn makes live there: the listeners on a VIP of a pool
	// in the tenant's attachment. It fails, without running fn, when the
	// attachment is not up on this host.
	InNamespace(tenant string, fn func() error) error
}

// ErrNoAttachments: a listener's VIP lives in a tenant's attachment and
// this proxy has no Config.Attachments to open it there.
var ErrNoAttachments = errors.New("the VIP lives in a tenant's attachment and this host attaches no tenant")

// inSpace runs fn, which makes the socket of k, in the namespace k's
// address lives in: a tenant's attachment (k.Space), else the host's.
func (p *Proxy) inSpace(k snapshot.Key, fn func() error) error {
	if k.Space == "" {
		return fn()
	}
	if p.cfg.Attachments == nil {
		return fmt.Errorf("%s: %w", k, ErrNoAttachments)
	}
	if err := p.cfg.Attachments.InNamespace(k.Space, fn); err != nil {
		return fmt.Errorf("open %s in tenant %s's attachment: %w", k, k.Space, err)
	}
	return nil
}

// dial dials a member of tenant with d: through the tenant's attachment
// when it has one, else from the host's namespace.
func (p *Proxy) dial(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error) {
	if a := p.cfg.Attachments; a != nil && a.Attached(tenant) {
		return a.DialContext(ctx, tenant, d, network, addr)
	}
	return d.DialContext(ctx, network, addr)
}

// tenantDialer is a tenant's l7.Dialer: each dial looks the tenant's
// attachment up, so a backend built before an attachment changed dials
// through the current one.
type tenantDialer struct {
	a      Attachments
	tenant string
}

func (t tenantDialer) DialContext(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	if t.a.Attached(t.tenant) {
		return t.a.DialContext(ctx, t.tenant, d, network, addr)
	}
	return d.DialContext(ctx, network, addr)
}

var _ l7.Dialer = tenantDialer{}

// dialUDP connects a UDP socket to member from tenant's namespace; with
// client valid (a pool with ClientSource), from client's own address.
func (p *Proxy) dialUDP(tenant string, member netip.AddrPort, client netip.Addr) (*net.UDPConn, error) {
	if client.IsValid() {
		if otherFamily(client, member) {
			return nil, errOtherFamily
		}
		var d net.Dialer
		if err := p.clientSourceDialer(&d, "udp", client); err != nil {
			return nil, err
		}
		c, err := d.DialContext(context.Background(), "udp", member.String())
		if err != nil {
			return nil, err
		}
		return c.(*net.UDPConn), nil
	}
	if a := p.cfg.Attachments; a != nil && a.Attached(tenant) {
		c, err := a.DialContext(context.Background(), tenant, &net.Dialer{}, "udp", member.String())
		if err != nil {
			return nil, err
		}
		return c.(*net.UDPConn), nil
	}
	return net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(member))
}

// healthDial is the health checks' dial: through the checked tenant's
// attachment (nil without Config.Attachments).
func (p *Proxy) healthDial() func(ctx context.Context, tenant string, d *net.Dialer, network, addr string) (net.Conn, error) {
	if p.cfg.Attachments == nil {
		return nil
	}
	return p.dial
}
