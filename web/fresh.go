package web

import (
	"slices"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Staleness: data older than staleIntervals refresh intervals (and at
// least minStale) is marked stale on the page.
const (
	staleIntervals = 3
	minStale       = 3 * time.Second
)

func staleAfter(interval time.Duration) time.Duration {
	return max(staleIntervals*interval, minStale)
}

// addError records that part could not be read because of msg: one line
// per distinct message, naming every part it hit.
func addError(errs []ErrorLine, part, msg string, now time.Time) []ErrorLine {
	for i := range errs {
		if errs[i].Message == msg {
			if !slices.Contains(errs[i].Parts, part) {
				errs[i].Parts = append(errs[i].Parts, part)
			}
			return errs
		}
	}
	return append(errs, ErrorLine{Message: msg, Parts: []string{part}, Count: 1, Since: now})
}

// freshness remembers, across reads, when each host last answered and
// the errors that repeat, so a snapshot says how old each value is.
type freshness struct {
	// seen is when each host last answered.
	seen map[string]time.Time
	// readAt is when an LB host last answered the cluster status.
	readAt time.Time
}

// settle marks what in cur comes from hosts that did not answer: it
// keeps the last known picture from prev where this read has none, with
// the time it was observed, and never shows it as live. It counts the
// errors that repeat from prev.
func (f *freshness) settle(prev, cur *Snapshot, obs *pb.ObserveResponse, interval time.Duration) {
	now := cur.Time
	cur.IntervalSeconds = interval.Seconds()
	cur.StaleAfterSeconds = staleAfter(interval).Seconds()
	if prev != nil {
		for i := range cur.Errors {
			for _, p := range prev.Errors {
				if p.Message == cur.Errors[i].Message {
					cur.Errors[i].Count, cur.Errors[i].Since = p.Count+1, p.Since
				}
			}
		}
	}
	if cur.Reachable {
		f.readAt = now
	}
	cur.ReadAt = f.readAt

	// Which hosts answered this read: the observation says so per host;
	// without one, the cluster status does.
	answered := map[string]bool{}
	why := map[string]string{}
	if obs != nil {
		for _, h := range obs.GetHosts() {
			answered[h.GetNodeId()] = h.GetReachable()
			why[h.GetNodeId()] = h.GetError()
		}
	} else if cur.Reachable {
		for _, n := range cur.Cluster.Nodes {
			answered[n.ID] = n.Healthy
		}
	}
	for id, ok := range answered {
		if ok {
			f.seen[id] = now
		}
	}

	if prev != nil {
		if !cur.Reachable {
			// No server answered: keep the last picture of the cluster.
			cur.Cluster = cloneCluster(prev.Cluster)
			cur.Revision = prev.Revision
		}
		if listFailed(cur) {
			cur.Tenants, cur.Pools, cur.Certs = prev.Tenants, prev.Pools, prev.Certs
			cur.LBs = slices.Clone(prev.LBs)
			cur.objects, cur.objectsAt = prev.objects, prev.objectsAt
		}
		// A host's own report from an earlier read stays, marked
		// unreachable, with when it was observed.
		cur.Hosts = keepHosts(prev.Hosts, cur.Hosts, cur.Cluster.Nodes)
		// So do its reports of the tenants' BGP and attachments.
		// (Without an observation no host's report is in this read.)
		bgpAnswered := answered
		if obs == nil {
			bgpAnswered = nil
		}
		cur.BGP = keepBGP(prev.BGP, cur.BGP, bgpAnswered, why, cur.Cluster.Nodes)
		cur.Attachments = keepAttachments(prev.Attachments, cur.Attachments, bgpAnswered, why, cur.Cluster.Nodes)
	}
	for i := range cur.Cluster.Nodes {
		n := &cur.Cluster.Nodes[i]
		n.Reachable, n.Observed = answered[n.ID], f.seen[n.ID]
		if !n.Reachable {
			n.Healthy = false
			if n.Error == "" || !cur.Reachable {
				n.Error = orText(why[n.ID], "did not answer this read")
			}
		}
	}
	vips := map[string]*VIP{}
	for i := range cur.Cluster.VIPs {
		v := &cur.Cluster.VIPs[i]
		vips[v.Address] = v
		for j := range v.Holders {
			h := &v.Holders[j]
			h.Stale, h.Observed = !answered[h.Node], f.seen[h.Node]
		}
	}
	anyHost := slices.ContainsFunc(cur.Cluster.Nodes, func(n Node) bool { return n.Reachable })
	var last map[string]LB
	if prev != nil {
		last = make(map[string]LB, len(prev.LBs))
		for _, l := range prev.LBs {
			last[l.ID] = l
		}
	}
	unknown := "no LB host answered this read; "
	if anyHost && obs == nil {
		unknown = "the hosts' observations could not be read this time; "
	}
	for i := range cur.LBs {
		l := &cur.LBs[i]
		l.HeldBy, l.HeldByStale = holders(vips[l.Address])
		p, had := last[l.ID]
		if !anyHost || obs == nil {
			// Nothing this read says how it is: unknown, with the last
			// per-host picture and status there was.
			if had {
				l.Hosts, l.LastStatus = p.Hosts, p.LastStatus
			}
			l.Status = StatusUnknown
			l.Reasons = []string{unknown + lastHeard(f.readAt, l.LastStatus)}
		}
		hosts := slices.Clone(l.Hosts)
		for j := range hosts {
			h := &hosts[j]
			h.Observed = f.seen[h.Node]
			if answered[h.Node] {
				continue
			}
			if h.Reachable {
				h.Reachable, h.Error = false, orText(why[h.Node], "did not answer this read")
			}
			// What the host showed when it last answered, marked unknown.
			if i := slices.IndexFunc(p.Hosts, func(x LBHost) bool { return x.Node == h.Node }); had && i >= 0 && len(h.Members)+len(h.Listeners) == 0 {
				h.Listeners, h.Members, h.Problems = p.Hosts[i].Listeners, p.Hosts[i].Members, p.Hosts[i].Problems
			}
		}
		l.Hosts = hosts
	}
}

func lastHeard(at time.Time, status string) string {
	if at.IsZero() {
		return "none has answered since the dashboard started"
	}
	s := "the last answer came at " + at.UTC().Format(time.RFC3339)
	if status != "" {
		s += " (" + status + " then)"
	}
	return s
}

// listFailed reports whether a List call failed in this read.
func listFailed(s *Snapshot) bool { return s.listFailed }

func cloneCluster(c Cluster) Cluster {
	c.Nodes = slices.Clone(c.Nodes)
	c.VIPs = slices.Clone(c.VIPs)
	for i := range c.VIPs {
		c.VIPs[i].Holders = slices.Clone(c.VIPs[i].Holders)
	}
	return c
}
