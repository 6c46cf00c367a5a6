package web

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// dnsTenantsMax bounds the tenants whose last DNS answers the dashboard
// keeps (one per tenant page opened).
const dnsTenantsMax = 64

// DNSZone is one zone a host's DNS serves and its DNSSEC key state.
type DNSZone struct {
	Zone   string `json:"zone"`
	Signed bool   `json:"signed"`
	KeyTag uint32 `json:"keyTag,omitempty"`
	DS     string `json:"ds,omitempty"`
	// Error is why a signed zone has no key yet.
	Error string `json:"error,omitempty"`
	// During a key rollover: the new key, signing beside the current one,
	// its DS and the earliest finish.
	NextKeyTag  uint32     `json:"nextKeyTag,omitempty"`
	NextDS      string     `json:"nextDs,omitempty"`
	FinishAfter *time.Time `json:"finishAfter,omitempty"`
}

func dnsZones(h *pb.HostObservation) []DNSZone {
	out := []DNSZone{}
	for _, z := range h.GetDnsZones() {
		dz := DNSZone{Zone: clip(z.GetZone()), Signed: z.GetSigned(), KeyTag: z.GetKeyTag(), DS: clip(z.GetDs()), Error: clip(z.GetError()),
			NextKeyTag: z.GetNextKeyTag(), NextDS: clip(z.GetNextDs())}
		if fa := z.GetRolloverFinishAfter(); fa != nil {
			t := fa.AsTime()
			dz.FinishAfter = &t
		}
		out = append(out, dz)
	}
	return out
}

// DNSPage is one page of what the hosts' DNS answers for a tenant's
// names (`/api/dns`): each name and address once, with what each host
// does with it.
type DNSPage struct {
	Tenant string `json:"tenant"`
	// Time is when the hosts were asked.
	Time time.Time `json:"time"`
	// Hosts says per host whether it answered this time and how old the
	// data shown for it is.
	Hosts []DNSHost `json:"hosts"`
	// Total counts every row; Matching those the search and the filter
	// keep; Offset is the first row's index among them.
	Total    int      `json:"total"`
	Matching int      `json:"matching"`
	Offset   int      `json:"offset"`
	Rows     []DNSRow `json:"rows"`
}

// DNSHost is one host's part of a DNS page.
type DNSHost struct {
	Node string `json:"node"`
	// Reachable: the host answered this time. Observed is when the data
	// shown for it was observed (zero: never).
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
	Error     string    `json:"error,omitempty"`
	// Names counts the rows the host reports.
	Names int `json:"names"`
}

// DNSRow is one name and address of a load balancer (no address: the
// name is left out of the table, with the reason) and what each host's
// DNS does with it (absent: the host does not report it).
type DNSRow struct {
	Name    string           `json:"name"`
	LB      string           `json:"lb"`
	Address string           `json:"address"`
	On      map[string]DNSOn `json:"on"`
}

// DNSOn is a name and address on one host: answered, or left out and
// why. Stale: the host did not answer this time; this is what it
// answered when last asked.
type DNSOn struct {
	Answered bool   `json:"answered"`
	Reason   string `json:"reason,omitempty"`
	Stale    bool   `json:"stale,omitempty"`
}

// dnsLast is the last answer of each host about one tenant's names.
type dnsLast struct {
	asked time.Time
	// answered is each host of the last ask: whether it answered, why not.
	answered []DNSHost
	hosts    map[string]dnsHostLast
}

type dnsHostLast struct {
	at    time.Time
	names []*pb.DNSNameObservation
}

// dnsCache holds, per tenant, the hosts' last answers.
type dnsCache struct {
	mu sync.Mutex
	m  map[string]*dnsLast
	// one serialises the asks.
	one sync.Mutex
}

// dnsView asks the hosts (at most once per refresh interval per tenant)
// what their DNS answers for the tenant's names, and builds the page.
func (s *Server) dnsView(ctx context.Context, tenant string, offset, limit int, q, state string) (DNSPage, error) {
	c := &s.dnsCache
	c.one.Lock()
	defer c.one.Unlock()
	now := s.cfg.Now()
	c.mu.Lock()
	last := c.m[tenant]
	c.mu.Unlock()
	if last == nil || now.Sub(last.asked) >= s.cfg.Interval {
		ctx, cancel := context.WithTimeout(ctx, min(refreshTimeout, staleAfter(s.cfg.Interval)))
		obs, err := s.cfg.Source.Observe(ctx, &pb.ObserveRequest{Tenant: tenant, MaxEvents: 1})
		cancel()
		if err != nil {
			return DNSPage{}, err
		}
		next := &dnsLast{asked: now, hosts: map[string]dnsHostLast{}}
		if last != nil {
			maps.Copy(next.hosts, last.hosts)
		}
		for _, h := range obs.GetHosts() {
			d := DNSHost{Node: h.GetNodeId(), Reachable: h.GetReachable(), Error: clip(h.GetError())}
			if h.GetReachable() {
				next.hosts[d.Node] = dnsHostLast{at: now, names: h.GetDnsNames()}
			} else if d.Error == "" {
				d.Error = "did not answer"
			}
			next.answered = append(next.answered, d)
		}
		// A host that left the cluster's answer leaves the page.
		for id := range next.hosts {
			if !slices.ContainsFunc(next.answered, func(d DNSHost) bool { return d.Node == id }) {
				delete(next.hosts, id)
			}
		}
		c.mu.Lock()
		if c.m == nil || len(c.m) >= dnsTenantsMax {
			c.m = map[string]*dnsLast{}
		}
		c.m[tenant] = next
		c.mu.Unlock()
		last = next
	}
	hosts := slices.Clone(last.answered)
	for i := range hosts {
		hosts[i].Observed = last.hosts[hosts[i].Node].at
	}
	slices.SortFunc(hosts, func(a, b DNSHost) int { return strings.Compare(a.Node, b.Node) })
	return dnsPage(tenant, last.asked, hosts, last.hosts, offset, limit, q, state), nil
}

// dnsPage joins the hosts' names into rows (each name, load balancer and
// address once, by name) and cuts the page.
func dnsPage(tenant string, asked time.Time, hosts []DNSHost, data map[string]dnsHostLast, offset, limit int, q, state string) DNSPage {
	type key struct{ name, lb, addr string }
	idx := map[key]int{}
	var rows []DNSRow
	for i := range hosts {
		h := &hosts[i]
		for _, d := range data[h.Node].names {
			k := key{clip(d.GetName()), clip(d.GetLoadBalancer()), clip(d.GetAddress())}
			j, ok := idx[k]
			if !ok {
				j = len(rows)
				idx[k] = j
				rows = append(rows, DNSRow{Name: k.name, LB: k.lb, Address: k.addr, On: map[string]DNSOn{}})
			}
			rows[j].On[h.Node] = DNSOn{Answered: d.GetAnswered(), Reason: clip(d.GetReason()), Stale: !h.Reachable}
			h.Names++
		}
	}
	slices.SortFunc(rows, func(a, b DNSRow) int {
		return strings.Compare(a.Name+" "+a.LB+" "+a.Address, b.Name+" "+b.LB+" "+b.Address)
	})
	words := strings.Fields(strings.ToLower(q))
	var match []DNSRow
	for _, r := range rows {
		ok := true
		switch state {
		case "answered":
			ok = slices.ContainsFunc(slices.Collect(maps.Values(r.On)), func(o DNSOn) bool { return o.Answered })
		case "left-out":
			ok = slices.ContainsFunc(slices.Collect(maps.Values(r.On)), func(o DNSOn) bool { return !o.Answered })
		}
		text := strings.ToLower(r.Name + " " + r.LB + " " + r.Address)
		for _, w := range words {
			ok = ok && strings.Contains(text, w)
		}
		if ok {
			match = append(match, r)
		}
	}
	if offset >= len(match) {
		offset = max(0, (len(match)-1)/limit*limit)
	}
	p := DNSPage{Tenant: tenant, Time: asked, Hosts: nonNil(hosts), Total: len(rows), Matching: len(match), Offset: offset, Rows: []DNSRow{}}
	p.Rows = append(p.Rows, match[offset:min(len(match), offset+limit)]...)
	return p
}

// dns serves /api/dns?tenant=T&offset=0&limit=100&q=words&state=left-out:
// one page of what the hosts' DNS answers for the tenant's names, asked
// of the hosts at most once per refresh interval.
func (s *Server) dns(w http.ResponseWriter, r *http.Request) {
	offset, limit, q, ok := pageArgs(w, r)
	if !ok {
		return
	}
	state := r.URL.Query().Get("state")
	if state != "" && state != "answered" && state != "left-out" {
		http.Error(w, "state must be answered, left-out or empty", http.StatusBadRequest)
		return
	}
	snap, tenant := s.tenantArg(w, r)
	if snap == nil {
		return
	}
	p, err := s.dnsView(r.Context(), tenant, offset, limit, q, state)
	if err != nil {
		http.Error(w, "cannot ask the hosts: "+clip(err.Error()), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(p)
}
