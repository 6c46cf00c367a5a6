// Package netlab builds small networks on one Linux machine for
// end-to-end tests: each host is a network namespace (`ip netns`), joined
// to a bridge by a veth pair, and the bridge lives in a namespace of its
// own, so that a lab never touches the machine's own network. Processes
// run inside hosts through `ip netns exec`; Go code runs inside one with
// Host.Do. Cutting a host's cable is setting its bridge port down.
//
// Lab.Close kills every process the lab started and deletes its
// namespaces; New also deletes the namespaces of labs whose test process
// died without cleaning up. Labs need root (or CAP_SYS_ADMIN and
// CAP_NET_ADMIN) and the `ip` tool from iproute2.
package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// commandTimeout bounds every `ip` command a lab runs.
const commandTimeout = 10 * time.Second

// ErrUnavailable: this machine cannot run labs; the message says why.
var ErrUnavailable = errors.New("network labs unavailable")

var labCount atomic.Int64

// Check says why labs cannot run here, or returns nil.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root to create network namespaces", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip tool (Debian package iproute2) is not installed", ErrUnavailable)
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return fmt.Errorf("%w: the kernel has no network namespaces", ErrUnavailable)
	}
	return nil
}

// Lab is a set of hosts on one bridge, plus any point-to-point links.
type Lab struct {
	prefix string // of every namespace name: "tl<pid>-<n>-"
	sw     string // the bridge's namespace

	mu     sync.Mutex
	hosts  []*Host
	procs  []*Process
	ports  int
	closed bool
}

// New creates an empty lab: a namespace holding the bridge br0. It first
// removes the namespaces of labs whose process is gone.
func New() (*Lab, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	removeStale()
	l := &Lab{prefix: fmt.Sprintf("tl%d-%d-", os.Getpid(), labCount.Add(1))}
	l.sw = l.prefix + "sw"
	steps := [][]string{
		{"netns", "add", l.sw},
		{"-n", l.sw, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			l.Close()
			return nil, err
		}
	}
	// No IPv6 on the bridge and its ports: they only forward frames.
	if err := l.sysctl(l.sw, "net.ipv6.conf.all.disable_ipv6", "1"); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.sysctl(l.sw, "net.ipv6.conf.default.disable_ipv6", "1"); err != nil {
		l.Close()
		return nil, err
	}
	for _, s := range [][]string{
		{"-n", l.sw, "link", "add", "br0", "type", "bridge", "forward_delay", "0", "mcast_snooping", "0"},
		{"-n", l.sw, "link", "set", "br0", "up"},
	} {
		if err := ipCmd(s...); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// removeStale deletes the namespaces of labs whose process has exited.
func removeStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "tl")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = ipCmd("netns", "del", e.Name())
		}
	}
}

// Host is one network namespace of a lab.
type Host struct {
	Name string
	// NS is the namespace's name for `ip netns`.
	NS  string
	lab *Lab
	// port is the host's veth end in the bridge's namespace ("" for a
	// host not on the bridge).
	port string
	// MAC is the address of the host's eth0.
	MAC net.HardwareAddr
}

// AddHost creates a host whose eth0 is on the bridge, with the given
// addresses ("192.0.2.11/24", "2001:db8::11/64"). IPv6 addresses skip
// duplicate address detection, and the host answers no router
// advertisements.
func (l *Lab) AddHost(name string, addrs ...string) (*Host, error) {
	h, err := l.newHost(name)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.ports++
	h.port = "p" + strconv.Itoa(l.ports)
	h.MAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, byte(l.ports >> 8), byte(l.ports)}
	l.mu.Unlock()
	steps := [][]string{
		{"-n", l.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"-n", l.sw, "link", "set", h.port, "master", "br0", "up"},
		{"-n", h.NS, "link", "set", "eth0", "address", h.MAC.String(), "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	if err := h.AddAddrs("eth0", addrs...); err != nil {
		return nil, err
	}
	return h, nil
}

// AddBareHost creates a host with only its loopback interface; Connect
// gives it links.
func (l *Lab) AddBareHost(name string) (*Host, error) { return l.newHost(name) }

// newHost creates a namespace with lo up and quiet IPv6 defaults.
func (l *Lab) newHost(name string) (*Host, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("lab is closed")
	}
	h := &Host{Name: name, NS: l.prefix + name, lab: l}
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	if err := ipCmd("netns", "add", h.NS); err != nil {
		return nil, err
	}
	if err := ipCmd("-n", h.NS, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	for _, k := range []string{"all", "default"} {
		for key, v := range map[string]string{"accept_dad": "0", "accept_ra": "0", "dad_transmits": "0"} {
			if err := l.sysctl(h.NS, "net.ipv6.conf."+k+"."+key, v); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// Connect joins two hosts with a veth pair of their own (a point-to-point
// cable), named ifA in a and ifB in b, and gives each end its addresses.
func (l *Lab) Connect(a *Host, ifA string, addrsA []string, b *Host, ifB string, addrsB []string) error {
	steps := [][]string{
		{"-n", a.NS, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.NS},
		{"-n", a.NS, "link", "set", ifA, "up"},
		{"-n", b.NS, "link", "set", ifB, "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	if err := a.AddAddrs(ifA, addrsA...); err != nil {
		return err
	}
	return b.AddAddrs(ifB, addrsB...)
}

// AddAddrs adds addresses to one of the host's interfaces.
func (h *Host) AddAddrs(ifname string, addrs ...string) error {
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("address %q: want a prefix like 192.0.2.11/24", a)
		}
		args := []string{"-n", h.NS, "addr", "add", p.String(), "dev", ifname}
		if p.Addr().Is6() {
			args = append(args, "nodad")
		}
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// IP runs `ip -n NS args...` for the host.
func (h *Host) IP(args ...string) error {
	return ipCmd(append([]string{"-n", h.NS}, args...)...)
}

// Sysctl sets a kernel setting inside the host ("net.ipv4.ip_forward").
func (h *Host) Sysctl(key, value string) error { return h.lab.sysctl(h.NS, key, value) }

func (l *Lab) sysctl(ns, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	_, err := run("ip", "netns", "exec", ns, "sh", "-c", `echo "$1" > "$2"`, "sysctl", value, path)
	if err != nil {
		return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}

// Exec runs a command inside the host and returns its combined output.
func (h *Host) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), h.Name, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// SetLink plugs the host's cable to the bridge in or out: its bridge port
// goes up or down, and eth0 in the host loses or regains its carrier.
func (h *Host) SetLink(up bool) error {
	if h.port == "" {
		return fmt.Errorf("%s is not on the bridge", h.Name)
	}
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd("-n", h.lab.sw, "link", "set", h.port, state)
}

// HostAddrs returns the addresses on one of the host's interfaces.
func (h *Host) HostAddrs(ifname string) ([]netip.Prefix, error) {
	out, err := run("ip", "-n", h.NS, "-o", "addr", "show", "dev", ifname)
	if err != nil {
		return nil, err
	}
	var ps []netip.Prefix
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" || f[i] == "inet6" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					ps = append(ps, p)
				}
			}
		}
	}
	return ps, nil
}

// HasAddr reports whether a is on the host's interface.
func (h *Host) HasAddr(ifname string, a netip.Addr) (bool, error) {
	ps, err := h.HostAddrs(ifname)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.Addr() == a {
			return true, nil
		}
	}
	return false, nil
}

// Close kills the lab's processes and deletes its namespaces. It is safe
// to call more than once.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs, hosts := l.procs, l.hosts
	l.mu.Unlock()
	var errs []error
	for _, p := range procs {
		p.killGroup()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("%s did not exit", p.name))
		}
	}
	for _, h := range hosts {
		if err := ipCmd("netns", "del", h.NS); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ipCmd("netns", "del", l.sw); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func ipCmd(args ...string) error {
	_, err := run("ip", args...)
	return err
}

func run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}
