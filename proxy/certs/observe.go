package certs

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api/observe"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

var _ observe.Source = (*Manager)(nil)

// Observe adds the certificates this host serves, or should serve, to h:
// per ACME name its state in this host's cache (valid with its expiry,
// failed with the last error, pending, or refused), and the uploaded
// certificates, for the tenants f selects.
func (m *Manager) Observe(f observe.Filter, h *pb.HostObservation) {
	d := m.latest.Load()
	if d == nil {
		return
	}
	var out []*pb.CertificateObservation
	for host, tenant := range d.managed {
		if !f.MatchTenant(tenant) {
			continue
		}
		co := &pb.CertificateObservation{Host: host, Tenant: tenant, Source: SourceACME, State: StatePending}
		failure, _ := m.failures.Load(host)
		co.LastError, _ = failure.(string)
		if c, ok := m.managedCert(host); ok {
			co.State, co.NotAfter = StateValid, timestamppb.New(c.Leaf.NotAfter)
		} else if co.LastError != "" {
			co.State = StateFailed
		}
		out = append(out, co)
	}
	for host, r := range d.refused {
		if f.MatchTenant(r.tenant) {
			out = append(out, &pb.CertificateObservation{Host: host, Tenant: r.tenant, Source: SourceACME, State: StateRefused, LastError: r.reason})
		}
	}
	for _, c := range d.uploaded {
		if !f.MatchTenant(c.GetTenant()) {
			continue
		}
		for _, host := range c.GetHosts() {
			out = append(out, &pb.CertificateObservation{Host: host, Tenant: c.GetTenant(), Source: c.GetSource(),
				State: c.GetState(), NotAfter: c.GetNotAfter(), LastError: c.GetLastError()})
		}
	}
	slices.SortFunc(out, func(a, b *pb.CertificateObservation) int { return strings.Compare(a.Host, b.Host) })
	h.Certificates = append(h.Certificates, out...)
}

// event hands an event about the certificate of host to Config.Events.
func (m *Manager) event(typ, severity, host, msg string) {
	if m.cfg.Events == nil {
		return
	}
	ev := &pb.Event{Type: typ, Severity: severity, Message: msg, Host: host}
	if acme := m.acme.Load(); acme != nil {
		ev.Tenant = (*acme)[host]
	}
	m.cfg.Events(ev)
}
