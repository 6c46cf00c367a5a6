package netlab

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// AddBridge adds another bridge (a second network segment) beside br0,
// in the bridge namespace; AttachHost plugs hosts into it.
func (l *Lab) AddBridge(name string) error {
	for _, s := range [][]string{
		{"-n", l.sw, "link", "add", name, "type", "bridge", "forward_delay", "0", "mcast_snooping", "0"},
		{"-n", l.sw, "link", "set", name, "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// AttachHost gives h an interface named ifname on the bridge (added by
// AddBridge), with the addresses given, and returns its hardware address
// (02:00:00:01:..: apart from every eth0's).
func (l *Lab) AttachHost(h *Host, bridge, ifname string, addrs ...string) (net.HardwareAddr, error) {
	l.mu.Lock()
	l.ports++
	port := "p" + strconv.Itoa(l.ports)
	mac := net.HardwareAddr{0x02, 0x00, 0x00, 0x01, byte(l.ports >> 8), byte(l.ports)}
	l.mu.Unlock()
	for _, s := range [][]string{
		{"-n", l.sw, "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", h.NS},
		{"-n", l.sw, "link", "set", port, "master", bridge, "up"},
		{"-n", h.NS, "link", "set", ifname, "address", mac.String(), "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	return mac, h.AddAddrs(ifname, addrs...)
}

// GratuitousARP is one gratuitous ARP frame (sender and target address
// the same) seen on an interface.
type GratuitousARP struct {
	Addr netip.Addr
	MAC  net.HardwareAddr // the sender's hardware address
}

// ARPWatch records the gratuitous ARP frames an interface of a host sees
// until Stop.
type ARPWatch struct {
	conn *packet.Conn
	done chan struct{}
	mu   sync.Mutex
	seen []GratuitousARP
}

// WatchARP starts recording the gratuitous ARP frames that reach ifname.
func (h *Host) WatchARP(ifname string) (*ARPWatch, error) {
	w := &ARPWatch{done: make(chan struct{})}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		w.conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(w.done)
		buf := make([]byte, 1600)
		for {
			n, _, err := w.conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if g, ok := gratuitous(buf[:n]); ok {
				w.mu.Lock()
				w.seen = append(w.seen, g)
				w.mu.Unlock()
			}
		}
	}()
	return w, nil
}

// Seen returns the frames recorded so far for a.
func (w *ARPWatch) Seen(a netip.Addr) []GratuitousARP {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []GratuitousARP
	for _, g := range w.seen {
		if g.Addr == a {
			out = append(out, g)
		}
	}
	return out
}

// Reset forgets what was recorded.
func (w *ARPWatch) Reset() {
	w.mu.Lock()
	w.seen = nil
	w.mu.Unlock()
}

// Stop ends the recording.
func (w *ARPWatch) Stop() {
	_ = w.conn.SetReadDeadline(time.Now())
	w.conn.Close()
	<-w.done
}

// gratuitous parses an Ethernet frame holding an IPv4 ARP packet whose
// sender and target protocol addresses are the same.
func gratuitous(f []byte) (GratuitousARP, bool) {
	const eth = 14
	if len(f) < eth+28 || f[12] != 0x08 || f[13] != 0x06 {
		return GratuitousARP{}, false
	}
	p := f[eth:]
	// Ethernet, IPv4, lengths 6 and 4.
	if p[0] != 0 || p[1] != 1 || p[2] != 0x08 || p[3] != 0 || p[4] != 6 || p[5] != 4 {
		return GratuitousARP{}, false
	}
	sha, spa, tpa := p[8:14], p[14:18], p[24:28]
	if string(spa) != string(tpa) {
		return GratuitousARP{}, false
	}
	return GratuitousARP{Addr: netip.AddrFrom4([4]byte(spa)), MAC: net.HardwareAddr(append([]byte(nil), sha...))}, true
}
