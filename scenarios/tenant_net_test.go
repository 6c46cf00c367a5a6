package scenarios

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// podNet is a network namespace standing in for a tenant's pod network:
// the API server refuses loopback endpoint addresses, so backends listen on
// addresses of a veth pair into a namespace the test creates.
type podNet struct {
	t      testing.TB
	ns     string
	prefix string // e.g. 10.250.7
}

var podNets atomic.Int32

// newPodNet creates the namespace with addresses prefix.2 to prefix.(1+n)
// on its side; the LB hosts reach them over the veth pair. It skips the
// test where namespaces cannot be made, except in CI.
func newPodNet(t testing.TB, n int) *podNet {
	t.Helper()
	id := (os.Getpid()%200)*10 + int(podNets.Add(1))%10
	p := &podNet{t: t, ns: fmt.Sprintf("teapot-pods-%d", id), prefix: fmt.Sprintf("10.250.%d", id%250)}
	host, peer := fmt.Sprintf("tpph%d", id), fmt.Sprintf("tppn%d", id)
	_ = exec.Command("ip", "netns", "del", p.ns).Run()
	_ = exec.Command("ip", "link", "del", host).Run()
	steps := [][]string{
		{"ip", "netns", "add", p.ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", p.ns},
		{"ip", "addr", "add", p.prefix + ".1/24", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "netns", "exec", p.ns, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", p.ns, "ip", "link", "set", peer, "up"},
	}
	for i := range n {
		steps = append(steps, []string{"ip", "netns", "exec", p.ns, "ip", "addr", "add", fmt.Sprintf("%s.%d/24", p.prefix, i+2), "dev", peer})
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", p.ns).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("%s: %v: %s", strings.Join(s, " "), err, out)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			unavailable(t, "needs a network namespace for the pod network (root and iproute2): %s", msg)
		}
	}
	return p
}

// addr returns the i-th pod address (0-based).
func (p *podNet) addr(i int) string { return fmt.Sprintf("%s.%d", p.prefix, i+2) }

// network is the pod network's CIDR.
func (p *podNet) network() string { return p.prefix + ".0/24" }

// listen opens a TCP listener inside the namespace.
func (p *podNet) listen(addr string) (net.Listener, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + p.ns)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter %s: %w", p.ns, err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", err))
	}
	return ln, lerr
}
