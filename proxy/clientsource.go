package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/clientsource"
)

// ClientSource is the host's side of member connections made from
// clients' addresses (pools.*.clientSource): the policy routing that
// delivers the members' replies to those sockets (proxy/clientsource's
// Host).
type ClientSource interface {
	// Ensure puts the host's pieces of one family in place (v6 false:
	// IPv4), or says why it cannot.
	Ensure(v6 bool) error
}

var _ ClientSource = (*clientsource.Host)(nil)

// RefusedClientSource: the pool dials from the client's address and this
// host cannot (no Config.ClientSource, or its policy routing could not be
// installed: the log says why).
const RefusedClientSource = "client-source"

// ErrNoClientSource: a pool asks for member connections from the client's
// address and this proxy has no Config.ClientSource.
var ErrNoClientSource = errors.New("this host does not dial members from clients' addresses")

// clientSourceDialer sets d up to dial from client's own address: the
// host's policy routing for client's family in place, the socket
// transparent and bound to client with a port of the host's choice.
func (p *Proxy) clientSourceDialer(d *net.Dialer, network string, client netip.Addr) error {
	cs := p.cfg.ClientSource
	if cs == nil {
		return ErrNoClientSource
	}
	if err := cs.Ensure(client.Is6()); err != nil {
		return err
	}
	d.Control = clientsource.Control
	switch network {
	case "udp":
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(client, 0))
	default:
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 0))
	}
	return nil
}

// otherFamily reports whether member cannot be dialled from client's
// address: they are of different families.
func otherFamily(client netip.Addr, member netip.AddrPort) bool {
	return client.Is4() != member.Addr().Unmap().Is4()
}

// errOtherFamily: no member of the client's family.
var errOtherFamily = fmt.Errorf("%w: the member is of another address family than the client", ErrNoClientSource)

// clientSourceKey is what clientSourceErrs keys a failure by: the load
// balancer and what failed, the client's address family (the host's
// policy routing is per family, so one may work while the other fails) or
// famOther, a member of another family than the client (a pool of both
// families, which a working dial never clears).
type clientSourceKey struct {
	lb  string
	fam byte
}

const (
	fam4     = '4'
	fam6     = '6'
	famOther = 'x'
)

func clientFamily(client netip.Addr) byte {
	if client.Unmap().Is4() {
		return fam4
	}
	return fam6
}

// clientSourceFailed reports that l's pool cannot dial from client's
// address on this host: an event (and a log line) when the reason is new
// for l's load balancer and what failed (clientSourceKey), so a refused
// connection a second is not an event a second. The reason is forgotten
// when a member connection from an address of the same family is made
// again (clientSourceWorks) and when the load balancer changes or leaves
// (apply), so the map holds only load balancers that exist and fail now,
// and a failure that comes back is reported again.
func (p *Proxy) clientSourceFailed(l *ListenerSnapshot, client netip.Addr, err error) {
	msg := err.Error()
	key := clientSourceKey{l.LB, clientFamily(client)}
	if errors.Is(err, errOtherFamily) {
		key.fam = famOther
	}
	if prev, ok := p.clientSourceErrs.Swap(key, msg); ok && prev == msg {
		return
	}
	p.log.Warn("connections refused: the pool dials members from clients' addresses and this host cannot", "lb", l.LB, "listener", l.Name, "error", msg)
	p.event(&pb.Event{Type: observe.EventClientSourceFailed, Severity: observe.Warning, Tenant: l.Tenant, LoadBalancer: l.LB,
		Message: fmt.Sprintf("%s: connections refused: members are dialled from clients' addresses (clientSource) and this host cannot: %s", l.Name, msg)})
}

// clientSourceWorks forgets the last failure of lb's load balancer to
// dial from an address of client's family: one was made.
func (p *Proxy) clientSourceWorks(lb string, client netip.Addr) {
	key := clientSourceKey{lb, clientFamily(client)}
	if _, ok := p.clientSourceErrs.Load(key); ok {
		p.clientSourceErrs.Delete(key)
	}
}

// forgetClientSource forgets every failure of lb to dial from clients'
// addresses: it changed or left.
func (p *Proxy) forgetClientSource(lb string) {
	for _, fam := range []byte{fam4, fam6, famOther} {
		p.clientSourceErrs.Delete(clientSourceKey{lb, fam})
	}
}
