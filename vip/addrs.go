package vip

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// leaseTime is the lifetime of every VIP address this package adds; the
// manager renews it every leaseRenew. An address left behind by a
// process that died expires by itself within about leaseTime, and a new
// process removes it at start.
const (
	leaseTime  = 5 * time.Second
	leaseRenew = time.Second
)

// iface adds and removes VIP addresses on one interface. Addresses are
// host routes (/32, /128) marked as this package's own: a finite
// lifetime, no prefix route, IPv6 without duplicate address detection
// (and deprecated, so never a source address), and on IPv4 the label
// "<interface>:vip" when the name leaves room.
type iface struct {
	name string
	// ns is the path of the network namespace the interface lives in
	// (a tenant's attachment, netns.go); "" for the host's own.
	ns string
}

// String names the interface, with its namespace when it has one.
func (f iface) String() string {
	if f.ns == "" {
		return f.name
	}
	return f.name + " in namespace " + filepath.Base(f.ns)
}

// handle returns a netlink handle in the interface's namespace and what
// closes it.
func (f iface) handle() (*netlink.Handle, func(), error) {
	if f.ns == "" {
		return &netlink.Handle{}, func() {}, nil
	}
	ns, err := netns.GetFromPath(f.ns)
	if err != nil {
		return nil, nil, fmt.Errorf("namespace %s: %w", filepath.Base(f.ns), err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("netlink in namespace %s: %w", filepath.Base(f.ns), err)
	}
	return h, func() { h.Close(); ns.Close() }, nil
}

func (f iface) label() string {
	if l := f.name + ":vip"; len(l) < unix.IFNAMSIZ {
		return l
	}
	return ""
}

func (f iface) link() (netlink.Link, error) {
	h, done, err := f.handle()
	if err != nil {
		return nil, err
	}
	defer done()
	return f.linkWith(h)
}

func (f iface) linkWith(h *netlink.Handle) (netlink.Link, error) {
	l, err := h.LinkByName(f.name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", f, err)
	}
	return l, nil
}

func (f iface) addr(a netip.Addr) *netlink.Addr {
	bits := a.BitLen()
	na := &netlink.Addr{
		IPNet:       &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, bits)},
		ValidLft:    int(leaseTime / time.Second),
		PreferedLft: int(leaseTime / time.Second),
		Flags:       unix.IFA_F_NOPREFIXROUTE,
	}
	if a.Is4() {
		na.Label = f.label()
	} else {
		// Deprecated (preferred lifetime 0): the address still receives
		// and can be bound, but the kernel never picks it as the source
		// of this host's own connections (RFC 6724 rule 3), so that a BGP
		// session or a health check does not leave from a VIP.
		na.Flags |= unix.IFA_F_NODAD
		na.PreferedLft = 0
	}
	return na
}

// add puts a on the interface, or renews its lease.
func (f iface) add(a netip.Addr) error {
	h, done, err := f.handle()
	if err != nil {
		return err
	}
	defer done()
	l, err := f.linkWith(h)
	if err != nil {
		return err
	}
	if err := h.AddrReplace(l, f.addr(a)); err != nil {
		return fmt.Errorf("add %s to %s: %w", a, f, permission(err))
	}
	return nil
}

// remove takes a off the interface; an address already gone is no error,
// nor is an interface or a namespace that is gone (and the address with
// it: a tenant's attachment taken down).
func (f iface) remove(a netip.Addr) error {
	h, done, err := f.handle()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer done()
	l, err := f.linkWith(h)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return err
	}
	err = h.AddrDel(l, f.addr(a))
	if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("remove %s from %s: %w", a, f, permission(err))
	}
	return nil
}

// hostAddrs lists the /32 and /128 addresses on the interface; ours
// reports whether each carries this package's marks.
func (f iface) hostAddrs() (map[netip.Addr]bool, error) {
	h, done, err := f.handle()
	if err != nil {
		return nil, err
	}
	defer done()
	l, err := f.linkWith(h)
	if err != nil {
		return nil, err
	}
	list, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list addresses of %s: %w", f, err)
	}
	out := map[netip.Addr]bool{}
	for _, na := range list {
		a, ok := netip.AddrFromSlice(na.IP)
		ones, bits := na.Mask.Size()
		if !ok || ones != bits || na.Peer != nil {
			continue
		}
		a = a.Unmap()
		finite := na.ValidLft > 0 && uint32(na.ValidLft) != ^uint32(0)
		marked := na.Flags&unix.IFA_F_NOPREFIXROUTE != 0
		if a.Is4() {
			marked = marked && (f.label() == "" || na.Label == f.label())
		} else {
			marked = marked && na.Flags&unix.IFA_F_NODAD != 0
		}
		out[a] = finite && marked
	}
	return out, nil
}

// up reports whether the interface can carry traffic.
func (f iface) up() (bool, error) {
	l, err := f.link()
	if err != nil {
		return false, err
	}
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 {
		return false, nil
	}
	// Loopback and dummy interfaces report "unknown".
	return a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown, nil
}

func permission(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: CAP_NET_ADMIN: %v", ErrPermission, err)
	}
	return err
}

// Capabilities by number (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
)

// missingCaps returns the names of the capabilities in want that the
// effective set of /proc/self/status lacks.
func missingCaps(status string, want map[int]string) ([]string, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("read CapEff %q: %w", v, err)
		}
		var out []string
		for _, bit := range []int{capNetAdmin, capNetRaw} {
			if name, ok := want[bit]; ok && eff&(1<<bit) == 0 {
				out = append(out, name)
			}
		}
		return out, nil
	}
	return nil, errors.New("no CapEff line in /proc/self/status")
}

// checkCaps fails with one clear line when the process lacks a
// capability it needs.
func checkCaps(needRaw bool, what string) error {
	want := map[int]string{capNetAdmin: "CAP_NET_ADMIN"}
	if needRaw {
		want[capNetRaw] = "CAP_NET_RAW"
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("check capabilities: %w", err)
	}
	missing, err := missingCaps(string(status), want)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s needs %s: run as root or grant them (systemd: AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW)",
			ErrPermission, what, strings.Join(missing, " and "))
	}
	return nil
}
