package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy"
	"github.com/teapot-lb/teapot-lb/proxy/rateshare"
)

// rateSharePortOffset is the port of the total rate limits' counts between
// hosts, relative to each host's heartbeat port.
const rateSharePortOffset = 1

// rateShareAddr is where a host with heartbeat address hb shares its
// counts: the same IP, the next port (7947 by default).
func rateShareAddr(hb string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(hb)
	if err != nil || ap.Port() == 65535 {
		return netip.AddrPort{}, fmt.Errorf("rate share: heartbeat address %q: %v", hb, err)
	}
	return netip.AddrPortFrom(ap.Addr(), ap.Port()+rateSharePortOffset), nil
}

// rateShareService publishes the port, so that no member or health check
// reaches it.
func rateShareService(hb string) []*pb.NodeService {
	if ap, err := rateShareAddr(hb); hb != "" && err == nil {
		return []*pb.NodeService{{Name: api.ServiceRateShare, Addr: ap.String()}}
	}
	return nil
}

// rateShareKey derives the datagrams' key from the cluster CA's key, as
// the heartbeats' is.
func rateShareKey(caKeyPEM []byte) []byte {
	mac := hmac.New(sha256.New, caKeyPEM)
	mac.Write([]byte("teapot-lb rate share v1"))
	return mac.Sum(nil)
}

// rateHashKey derives the key header values of per-header rate limits
// are hashed under, the same on every host, so that a value's key matches
// across hosts.
func rateHashKey(caKeyPEM []byte) [16]byte {
	mac := hmac.New(sha256.New, caKeyPEM)
	mac.Write([]byte("teapot-lb rate-limit header hash v1"))
	return [16]byte(mac.Sum(nil))
}

// openRateShare starts sharing px's rate limit counts with the other
// hosts: its total limits', and its per-client and per-header limits'
// hot keys. A host that cannot bind the port counts alone (logged).
func openRateShare(ctx context.Context, hb string, caKeyPEM []byte, px *proxy.Proxy, log *slog.Logger, stack *closers) *rateshare.Sharer {
	if hb == "" {
		return nil // no VIP manager: no peers serve this host's VIPs
	}
	addr, err := rateShareAddr(hb)
	if err == nil {
		var s *rateshare.Sharer
		if s, err = rateshare.New(rateshare.Config{Addr: addr.String(), Key: rateShareKey(caKeyPEM), Source: px, Logger: log}); err == nil {
			stack.Push(s.Close)
			px.ShareRateKeys(rateHashKey(caKeyPEM))
			go s.Run(ctx)
			return s
		}
	}
	log.Error("total rate limits are counted on this host alone", "component", "proxy", "err", err)
	return nil
}

// followRateSharePeers points the sharer at every other host of the
// committed state, after a reset and after each revision that changed a
// node.
func followRateSharePeers(s *rateshare.Sharer, self string, r proxy.Revision, state func() ([]*pb.Object, uint64)) {
	if s == nil {
		return
	}
	objs := r.Objects
	if !r.Reset {
		changed := false
		for prev, next := range r.Transitions() {
			if prev.GetNode() != nil || next.GetNode() != nil {
				changed = true
				break
			}
		}
		if !changed {
			return
		}
		objs, _ = state()
	}
	var peers []netip.AddrPort
	for _, o := range objs {
		n := o.GetNode()
		if n == nil || n.GetId() == self {
			continue
		}
		if ap, err := rateShareAddr(n.GetHeartbeatAddr()); err == nil {
			peers = append(peers, ap)
		}
	}
	s.SetPeers(peers)
}
