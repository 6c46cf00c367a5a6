// Package attach joins attached tenants' networks to this LB host: for
// each tenant whose attachment lists this host, a network namespace
// (api.AttachmentNamespace) holding a VXLAN device with the tenant's VNI,
// the host's address in the tenant's network and routes to the tenant's
// networks. The data plane dials the tenant's members from inside it
// (DialContext), so tenants may reuse each other's addresses. See
// DESIGN.md.
package attach

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Errors of the package.
var (
	// ErrNotUp: a tenant's attachment is not up on this host; its members
	// are not dialled (never from the host's own routing table, where
	// another tenant may own the same addresses).
	ErrNotUp = errors.New("the tenant's attachment is not up on this host")
)

// States of an attachment on this host, as explain and /metrics show them.
const (
	StateUp = "up"
	// StateNotListed: the attachment names no address for this host.
	StateNotListed = "not-listed"
	StateFailed    = "failed"
)

// EventAttachment is the type of the events of attachments.
const EventAttachment = "attachment"

// Device is the name of the VXLAN device inside every namespace.
const Device = "tpx0"

// RouteProtocol marks the routes this package adds in a namespace
// (rtm_protocol), so that it removes only its own.
const RouteProtocol = 0xf6

// retryEvery is how often an attachment that failed is tried again.
const retryEvery = 5 * time.Second

// Config configures a Manager.
type Config struct {
	// NodeID is this host's id: the key of attachment.hosts, and the
	// owner written on the devices it makes (their alias).
	NodeID string
	Logger *slog.Logger
	// Events, when set, records a change of an attachment's state.
	Events func(*pb.Event)
	// NetnsDir is where named namespaces live (default /var/run/netns).
	NetnsDir string
}

// Manager reconciles the attachments of this host with the committed
// state and dials from them. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	// mu serialises reconciles.
	mu sync.Mutex
	// want is the attached tenants by name (guarded by mu).
	want map[string]*pb.Tenant
	// host is this process's own network namespace, where dialling
	// threads return.
	host *os.File
	// spaces is what the dialers read: every attached tenant, up or not.
	spaces atomic.Pointer[map[string]*space]
	// settled: the state Update passes is known to be the cluster's
	// committed state (Settle; guarded by mu). Until then nothing is
	// removed.
	settled bool
}

// space is one tenant's attachment on this host; published spaces are
// not modified.
type space struct {
	tenant string
	spec   *pb.TenantAttachment
	nets   []string
	state  string
	reason string
	since  time.Time
	// ns is the namespace, open while the attachment is up (nil
	// otherwise); dials hold refs so that it closes after the last.
	ns *nsRef
}

// New returns a Manager that holds nothing yet.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("component", "attach")
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = "/var/run/netns"
	}
	// The calling thread's namespace, not /proc/self's: that is the main
	// thread's, which a goroutine locked to it may have moved into a
	// tenant's namespace for a moment (InNamespace, dialIn). A thread no
	// goroutine holds is always in the host's.
	host, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open the host's network namespace: %w", err)
	}
	m := &Manager{cfg: cfg, want: map[string]*pb.Tenant{}, host: host}
	empty := map[string]*space{}
	m.spaces.Store(&empty)
	return m, nil
}

// Update takes the committed state's tenants and converges at once: it
// makes, adopts and changes namespaces and, once Settle was called,
// removes those no tenant wants on this host, including the leftovers
// of this host (namespaces with the package's prefix whose device it
// owns).
func (m *Manager) Update(objs []*pb.Object) {
	want := map[string]*pb.Tenant{}
	for _, o := range objs {
		if t := o.GetTenant(); t.GetAttachment() != nil {
			want[t.GetName()] = proto.CloneOf(t) // kept to compare with the next
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.want = want
	m.reconcile()
}

// Settle tells the manager that the state Update last passed it (or a
// later one) holds every write the cluster committed before this host
// started: the host has caught up. Until then Update makes and adopts
// but removes nothing, since a restarted host's first view is the state
// it restored (empty without a snapshot) and would otherwise cut the
// connections of namespaces it still wants. Settle removes the
// namespaces of this host no tenant wants; later calls do nothing.
func (m *Manager) Settle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled {
		return
	}
	m.settled = true
	m.cfg.Logger.Info("the committed state is known: removing the attachments no tenant wants", "attachments", len(*m.spaces.Load()))
	m.removeLeftovers(*m.spaces.Load())
}

// Run retries failed attachments until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		failed := false
		for _, s := range *m.spaces.Load() {
			failed = failed || s.state == StateFailed
		}
		if failed {
			m.mu.Lock()
			m.reconcile()
			m.mu.Unlock()
		}
	}
}

// Close removes nothing: the namespaces outlive the process so that a
// restart adopts them without cutting connections; the next start
// removes those no longer wanted once it is settled (Settle).
func (m *Manager) Close() error {
	for _, s := range *m.spaces.Load() {
		if s.ns != nil {
			s.ns.release()
		}
	}
	return m.host.Close()
}

// reconcile converges the host on m.want (mu held).
func (m *Manager) reconcile() {
	old := *m.spaces.Load()
	next := make(map[string]*space, len(m.want))
	for tenant, t := range m.want {
		prev := old[tenant]
		spec := t.GetAttachment()
		s := &space{tenant: tenant, spec: spec, nets: t.GetNetworks()}
		addr, listed := spec.GetHosts()[m.cfg.NodeID]
		switch {
		case !listed:
			s.state, s.reason = StateNotListed, fmt.Sprintf("attachment.hosts lists no address for host %s; add one to attach it", m.cfg.NodeID)
			if m.settled {
				m.remove(tenant)
			}
		default:
			if prev != nil && prev.state == StateUp && sameSpec(prev.spec, spec) && slices.Equal(prev.nets, s.nets) && prev.ns != nil {
				s.state, s.ns, s.since = StateUp, prev.ns, prev.since
				break
			}
			ns, err := m.apply(t, addr)
			if err != nil {
				s.state, s.reason = StateFailed, err.Error()
				m.cfg.Logger.Warn("attachment failed", "tenant", tenant, "err", err)
			} else {
				s.state, s.ns = StateUp, ns
			}
		}
		s.since = time.Now()
		if prev != nil && prev.state == s.state && prev.reason == s.reason {
			s.since = prev.since
		} else {
			m.event(tenant, s)
		}
		if prev != nil && prev.ns != nil && prev.ns != s.ns {
			prev.ns.release()
		}
		next[tenant] = s
	}
	for tenant, prev := range old {
		if _, ok := next[tenant]; ok {
			continue
		}
		if prev.ns != nil {
			prev.ns.release()
		}
		if !m.settled {
			continue // Settle removes it if no tenant wants it by then
		}
		m.remove(tenant)
		m.cfg.Logger.Info("attachment removed", "tenant", tenant)
		if m.cfg.Events != nil {
			m.cfg.Events(&pb.Event{Type: EventAttachment, Severity: observe.Info, Tenant: tenant,
				Message: "attachment removed from this host: namespace " + api.AttachmentNamespace(tenant) + " deleted"})
		}
	}
	m.spaces.Store(&next)
	if m.settled {
		m.removeLeftovers(next)
	}
}

func (m *Manager) event(tenant string, s *space) {
	if m.cfg.Events == nil {
		return
	}
	sev, msg := observe.Info, "attachment up in namespace "+api.AttachmentNamespace(tenant)
	if s.state != StateUp {
		sev, msg = observe.Warning, "attachment "+s.state+": "+s.reason
	}
	m.cfg.Events(&pb.Event{Type: EventAttachment, Severity: sev, Tenant: tenant, Message: msg})
}

func sameSpec(a, b *pb.TenantAttachment) bool {
	return a.GetVxlan().GetVni() == b.GetVxlan().GetVni() && slices.Equal(a.GetVxlan().GetRemotes(), b.GetVxlan().GetRemotes()) &&
		a.GetVxlan().GetPort() == b.GetVxlan().GetPort() && a.GetVxlan().GetUnderlay() == b.GetVxlan().GetUnderlay() &&
		a.GetGateway() == b.GetGateway() && a.GetMtu() == b.GetMtu() && mapsEqual(a.GetHosts(), b.GetHosts())
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// removeLeftovers deletes the namespaces with the package's prefix that
// this host made (their device's alias names it) and no tenant wants
// (mu held, settled).
func (m *Manager) removeLeftovers(keep map[string]*space) {
	ents, err := os.ReadDir(m.cfg.NetnsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		tenant, ok := strings.CutPrefix(e.Name(), api.AttachmentNamespacePrefix)
		if !ok {
			continue
		}
		if s := keep[tenant]; s != nil && s.state != StateNotListed {
			continue
		}
		owner, err := ownerOf(filepath.Join(m.cfg.NetnsDir, e.Name()))
		if err != nil || owner != m.owner() {
			continue
		}
		m.remove(tenant)
		m.cfg.Logger.Info("removed a leftover attachment", "namespace", e.Name())
	}
}

// owner is the alias this host writes on its devices.
func (m *Manager) owner() string { return "teapot-lb host " + m.cfg.NodeID }

// Observation is one attachment's state on this host.
type Observation struct {
	Tenant, Namespace, State, Reason string
	VNI                              uint32
	Address                          string
	Since                            time.Time
}

// Observe returns the attachments (of tenant only, when not empty),
// sorted by tenant.
func (m *Manager) Observe(tenant string) []Observation {
	var out []Observation
	for name, s := range *m.spaces.Load() {
		if tenant != "" && name != tenant {
			continue
		}
		out = append(out, Observation{Tenant: name, Namespace: api.AttachmentNamespace(name), State: s.state, Reason: s.reason,
			VNI: s.spec.GetVxlan().GetVni(), Address: s.spec.GetHosts()[m.cfg.NodeID], Since: s.since})
	}
	slices.SortFunc(out, func(a, b Observation) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// Describe says how tenant's members are dialled from this host: "" when
// the tenant is not attached (the host's routing table).
func (m *Manager) Describe(tenant string) string {
	s := (*m.spaces.Load())[tenant]
	if s == nil {
		return ""
	}
	if s.state != StateUp {
		return fmt.Sprintf("attachment %s (VNI %d) is %s on this host: not dialled", api.AttachmentNamespace(tenant), s.spec.GetVxlan().GetVni(), s.state)
	}
	return fmt.Sprintf("attachment %s (VNI %d, from %s)", api.AttachmentNamespace(tenant), s.spec.GetVxlan().GetVni(), s.spec.GetHosts()[m.cfg.NodeID])
}

// hostPrefix parses this host's address in the tenant's network.
func hostPrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("host address %q: %w", s, err)
	}
	return p, nil
}
