// Package clientsource makes member connections from the client's own
// address, as a transparent proxy does (HAProxy's "source 0.0.0.0 usesrc
// clientip", Linux TPROXY): the member socket is marked IP_TRANSPARENT
// and bound to the client's address with a port of the host's choice
// (Control), and the host's policy routing delivers the member's replies,
// addressed to the client, to that local socket (Host):
//
//   - nftables: a table per family (ip, ip6) named TableName whose
//     prerouting hook marks every packet that belongs to a transparent
//     socket ("socket transparent 1 meta mark set mark | Mark");
//   - a routing rule: packets carrying Mark look up table RouteTable;
//   - in RouteTable, a local route for every destination (0.0.0.0/0 or
//     ::/0 on lo), so a marked packet is delivered to the host.
//
// Nothing is installed until a family is first needed (Host.Ensure);
// installing is idempotent (a host that crashed finds and replaces its
// own pieces), and Close removes what it installed. The pieces are the
// host's; the replies reach it only when the tenant's network routes the
// clients' addresses via the LB host that dialled.
package clientsource

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host's pieces. Mark is one bit of the packet mark, set and matched
// under that bit alone, so other users of the mark keep theirs.
const (
	TableName    = "teapot_lb_client_source"
	Mark         = 0x00200000
	RouteTable   = 7447
	RulePriority = 7447
)

// ErrUnavailable: this host cannot dial from clients' addresses.
var ErrUnavailable = errors.New("this host cannot dial members from clients' addresses")

// Control is a net.Dialer's Control for a member socket bound to a
// client's address: IP_TRANSPARENT (IPV6_TRANSPARENT), so the host may
// bind an address it does not own, and for TCP IP_BIND_ADDRESS_NO_PORT,
// so the port is chosen at connect time per member and a busy client
// address does not run out of ports.
func Control(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if strings.HasSuffix(network, "6") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		}
		if serr != nil {
			serr = fmt.Errorf("set IP_TRANSPARENT (needs CAP_NET_ADMIN): %w", serr)
			return
		}
		if strings.HasPrefix(network, "tcp") {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		}
	})
	return errors.Join(err, serr)
}

// Config configures a Host.
type Config struct {
	Logger *slog.Logger
	// NFT is the nft binary (default "nft", found in PATH).
	NFT string
	// RetryAfter is how long a family that could not be installed is
	// refused before it is tried again (default 10s).
	RetryAfter time.Duration
}

// Host installs and removes the host's policy routing for member
// connections made from clients' addresses, per address family.
type Host struct {
	cfg Config
	log *slog.Logger

	// ready[f] is fam[f].installed, read without the lock on every
	// connection.
	ready [2]atomic.Bool

	mu     sync.Mutex
	closed bool
	fam    [2]familyState // [0] IPv4, [1] IPv6
}

type familyState struct {
	installed bool
	err       error
	failedAt  time.Time
}

// New returns a Host that has installed nothing.
func New(cfg Config) *Host {
	if cfg.NFT == "" {
		cfg.NFT = "nft"
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{cfg: cfg, log: log.With("component", "client-source")}
}

// Ensure installs the pieces of one family (v6 false: IPv4) unless they
// are: it returns nil once they are in place, and an error wrapping
// ErrUnavailable that says what the host lacks otherwise (repeated,
// without trying again, for RetryAfter).
func (h *Host) Ensure(v6 bool) error {
	if h.ready[famIndex(v6)].Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: closed", ErrUnavailable)
	}
	st := &h.fam[famIndex(v6)]
	if st.installed {
		return nil
	}
	if st.err != nil && time.Since(st.failedAt) < h.cfg.RetryAfter {
		return st.err
	}
	if err := h.install(v6); err != nil {
		if st.err == nil || st.err.Error() != err.Error() {
			h.log.Warn("member connections cannot be made from clients' addresses", "family", famName(v6), "error", err)
		}
		st.err, st.failedAt = err, time.Now()
		return err
	}
	h.log.Info("policy routing for member connections from clients' addresses installed", "family", famName(v6),
		"nftables", famName(v6)+" "+TableName, "mark", fmt.Sprintf("%#x", Mark), "table", RouteTable)
	*st = familyState{installed: true}
	h.ready[famIndex(v6)].Store(true)
	return nil
}

// Installed reports whether the pieces of a family are in place.
func (h *Host) Installed(v6 bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fam[famIndex(v6)].installed
}

// Close removes what Ensure installed; Ensure refuses afterwards.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.ready[0].Store(false)
	h.ready[1].Store(false)
	var errs []error
	for i, v6 := range []bool{false, true} {
		if !h.fam[i].installed {
			continue
		}
		if err := h.remove(v6); err != nil {
			errs = append(errs, err)
		}
		h.fam[i] = familyState{}
	}
	return errors.Join(errs...)
}

func famIndex(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

func famName(v6 bool) string {
	if v6 {
		return "ip6"
	}
	return "ip"
}

// nftScript defines the family's table anew in one transaction (declare,
// delete, define), whether or not it existed.
func nftScript(v6 bool) string {
	f := famName(v6)
	return fmt.Sprintf(`table %[1]s %[2]s
delete table %[1]s %[2]s
table %[1]s %[2]s {
	chain prerouting {
		type filter hook prerouting priority mangle; policy accept;
		meta l4proto { tcp, udp } socket transparent 1 meta mark set meta mark | %#[3]x accept
	}
}
`, f, TableName, Mark)
}

func (h *Host) nft(script string) error {
	path, err := exec.LookPath(h.cfg.NFT)
	if err != nil {
		return fmt.Errorf("%w: %s not found (install nftables): %w", ErrUnavailable, h.cfg.NFT, err)
	}
	cmd := exec.Command(path, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: nft: %w: %s (needs CAP_NET_ADMIN and the kernel's nft_socket)", ErrUnavailable, err, strings.TrimSpace(out.String()))
	}
	return nil
}

func family(v6 bool) int {
	if v6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

func rule(v6 bool) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family(v6)
	r.Mark = Mark
	mask := uint32(Mark)
	r.Mask = &mask
	r.Table = RouteTable
	r.Priority = RulePriority
	return r
}

func localRoute(v6 bool) (*netlink.Route, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	dst := &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	if v6 {
		dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: dst, Table: RouteTable, Type: unix.RTN_LOCAL,
		Scope: netlink.SCOPE_HOST, Family: family(v6)}, nil
}

// install puts the family's pieces in place: the local route first and
// the mark last, so no packet is marked before it can be delivered.
// A failure leaves nothing behind.
func (h *Host) install(v6 bool) error {
	if _, err := exec.LookPath(h.cfg.NFT); err != nil {
		return fmt.Errorf("%w: %s not found (install nftables): %w", ErrUnavailable, h.cfg.NFT, err)
	}
	rt, err := localRoute(v6)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := netlink.RouteReplace(rt); err != nil {
		return fmt.Errorf("%w: add the local route of table %d: %w (needs CAP_NET_ADMIN)", ErrUnavailable, RouteTable, err)
	}
	err = netlink.RuleAdd(rule(v6))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		err = fmt.Errorf("%w: add the routing rule fwmark %#x lookup %d: %w (needs CAP_NET_ADMIN)", ErrUnavailable, Mark, RouteTable, err)
	} else {
		err = h.nft(nftScript(v6))
	}
	if err != nil {
		_ = h.remove(v6)
	}
	return err
}

// remove takes the family's pieces away: the mark first.
func (h *Host) remove(v6 bool) error {
	var errs []error
	if err := h.nft(fmt.Sprintf("table %[1]s %[2]s\ndelete table %[1]s %[2]s\n", famName(v6), TableName)); err != nil {
		errs = append(errs, err)
	}
	if err := netlink.RuleDel(rule(v6)); err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("remove the routing rule: %w", err))
	}
	if rt, err := localRoute(v6); err == nil {
		if err := netlink.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("remove the local route: %w", err))
		}
	}
	return errors.Join(errs...)
}
