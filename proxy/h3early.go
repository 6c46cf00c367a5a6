package proxy

import (
	"crypto/tls"
	"slices"
	"time"

	"github.com/quic-go/quic-go"
)

// 0-RTT (TLS early data) on https listeners with http3ZeroRtt. A client
// that resumes a session sends its first requests with its ClientHello;
// an attacker who recorded them can send them again (early data has no
// protection against replay), so ServeQUIC serves the safe methods of a
// request received before the handshake completed with "Early-Data: 1"
// and answers the others 425 Too Early (l7.H3Conn.ServeEarly), and each
// tenant's 0-RTT connections are bounded on the host: a replayed flight
// costs at most the tenant's own bucket.
const (
	// H3EarlyRate and H3EarlyBurst bound the connections a tenant's
	// listeners accept 0-RTT on (per second, and at once). Past the
	// bucket the server rejects the early data (the client sends its
	// requests again after the handshake, a round trip later), and each
	// counts as RefusedEarlyData.
	H3EarlyRate  = 256
	H3EarlyBurst = 1024
)

// RefusedEarlyData: a client's 0-RTT rejected (its connection goes on
// without it), over the tenant's H3EarlyRate.
const RefusedEarlyData = "early-data"

// earlyTLS returns base for one connection admitted with 0-RTT (ad)
// whose ClientHello offers early data: the resumption is charged to the
// tenant of the listener the connection was admitted on (past its bucket
// the early data is rejected). quic-go accepts early data only when the
// connection's quic.Config allows it (quicConfig, from the same reading
// of the listener as ad) and the ticket was issued by a connection that
// allowed it. The configuration is made per connection, since
// UnwrapSession is not told which connection it unwraps for.
func (hs *h3Socket) earlyTLS(base *tls.Config, ad *h3Admitted) *tls.Config {
	// A clone of a configuration whose automatic ticket keys are not made
	// yet makes keys of its own (golang/go#60506): make them first, so
	// that every clone issues and reads the tickets of base.
	_, _ = base.DecryptTicket(nil, tls.ConnectionState{})
	cfg := base.Clone()
	cfg.GetConfigForClient = nil
	unwrap := base.UnwrapSession
	cfg.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		var ss *tls.SessionState
		var err error
		if unwrap != nil {
			ss, err = unwrap(identity, cs)
		} else {
			ss, err = cfg.DecryptTicket(identity, cs)
		}
		if err != nil || ss == nil || !ss.EarlyData {
			return ss, err
		}
		ss.EarlyData = hs.admitEarly(ad.l)
		return ss, nil
	}
	return cfg
}

// offersEarlyData reports whether a ClientHello carries the early_data
// extension (RFC 8446 section 4.2.10): its client sends 0-RTT. A client
// that resumes without it costs no early data, whatever its ticket
// allows.
func offersEarlyData(hello *tls.ClientHelloInfo) bool {
	return slices.Contains(hello.Extensions, extensionEarlyData)
}

// extensionEarlyData is the early_data extension's number.
const extensionEarlyData = 42

// admitEarly takes a token of the 0-RTT bucket of l's tenant.
func (hs *h3Socket) admitEarly(l *ListenerSnapshot) bool {
	p := hs.s.p
	acct := p.h3Limits(l.Tenant)
	if !acct.early.take(p.cfg.H3EarlyRate, p.cfg.H3EarlyBurst, time.Now()) {
		acct.earlyRejected.Add(1)
		p.metrics.ConnRefused(l.LB, l.Name, RefusedEarlyData)
		return false
	}
	acct.earlyAccepted.Add(1)
	return true
}

// awaitHandshake waits, for a connection the listener returned early,
// until it may be served: at once when its 0-RTT was accepted (its
// handshake still counts as in flight until it completes), else when
// its handshake completed. It reports false when the connection ended
// first.
func (hs *h3Socket) awaitHandshake(c *quic.Conn, ad *h3Admitted) bool {
	select {
	case <-c.HandshakeComplete():
		hs.handshakeDone(ad)
		return true
	default:
	}
	if c.ConnectionState().Used0RTT {
		hs.s.p.wg.Go(func() {
			select {
			case <-c.HandshakeComplete():
				hs.handshakeDone(ad)
			case <-c.Context().Done():
			}
		})
		return true
	}
	select {
	case <-c.HandshakeComplete():
		hs.handshakeDone(ad)
		return true
	case <-c.Context().Done():
		return false
	}
}

// h3Early reports whether a request of c, which accepted 0-RTT, is
// served before its handshake completed: it may have come in early data.
func h3Early(c *quic.Conn) bool {
	select {
	case <-c.HandshakeComplete():
		return false
	default:
		return true
	}
}
