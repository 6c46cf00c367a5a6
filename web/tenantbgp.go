package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// What a tenant's speakers and names put on the page is tenant-written:
// the page escapes it, and the server bounds it.
const (
	// textMax bounds one tenant-written string (a DNS name, a peer, a
	// reason) as the dashboard shows it.
	textMax = 256
	// streamSessionsMax bounds the BGP sessions of one tenant on one
	// host that the stream carries (the others are counted).
	streamSessionsMax = 32
	// netPageDefault and netPageMax: rows of one /api/dns or /api/bgp
	// page, as for /api/members.
	netPageDefault = memberPageDefault
	netPageMax     = memberPageMax
)

// clip cuts s to textMax bytes at a character boundary, marking the cut.
func clip(s string) string {
	if len(s) <= textMax {
		return s
	}
	i := textMax
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// TenantBGP is one tenant's BGP with every host: its sessions and how
// many prefixes each host accepted and dropped. The routes themselves are
// read a page at a time from /api/bgp.
type TenantBGP struct {
	Tenant string    `json:"tenant"`
	Hosts  []BGPHost `json:"hosts"`
}

// BGPHost is one tenant's BGP on one host, as the host last reported it.
type BGPHost struct {
	Node string `json:"node"`
	// Reachable is whether the host answered this read; Observed when
	// it last did (the data is from then).
	Reachable bool      `json:"reachable"`
	Observed  time.Time `json:"observed"`
	Error     string    `json:"error,omitempty"`
	// Problem is why the host has no sessions for the tenant.
	Problem  string       `json:"problem,omitempty"`
	Sessions []BGPSession `json:"sessions"`
	// SessionsLeftOut are sessions the stream does not carry (over
	// streamSessionsMax).
	SessionsLeftOut int `json:"sessionsLeftOut,omitempty"`
	// Accepted and Dropped count every prefix the host accepted and
	// dropped; Listed how many of them it listed (at most 100 of each).
	Accepted uint32 `json:"accepted"`
	Dropped  uint32 `json:"dropped"`
	Listed   int    `json:"listed"`
	// Closed counts the sessions closed for their prefix count or update
	// rate (state prefix-limit, or a reason naming the bound).
	Closed int `json:"closed"`
	// With bgp.reannounce: the tenant's routes the host announces to its
	// fabric routers, or why its speaker did not take them, since when
	// (all empty without reannounce, or from a host that does not say).
	Reannounced     uint32     `json:"reannounced,omitempty"`
	ReannounceError string     `json:"reannounceError,omitempty"`
	ReannounceSince *time.Time `json:"reannounceSince,omitempty"`
	// FabricSessions are the host's established sessions with its fabric
	// routers: with none, the routes re-announced reach no router.
	FabricSessions uint32 `json:"fabricSessions"`
	// Attachment is the tenant's namespace on the host when it is
	// attached: its sessions are made, and its routes installed, there
	// (empty: the host's own).
	Attachment string `json:"attachment,omitempty"`
	// Announced are the VIPs of bgp pools in the tenant's attachment the
	// host announces to the tenant's speakers (with the host's address
	// in the attachment as next hop), AnnounceError why it could not,
	// AnnounceSince since when that holds (nil: the host announces the
	// tenant none, or does not say).
	Announced     []BGPAnnounced `json:"announced,omitempty"`
	AnnounceError string         `json:"announceError,omitempty"`
	AnnounceSince *time.Time     `json:"announceSince,omitempty"`
	// AnnouncedLeftOut counts those past announcedMax, not listed.
	AnnouncedLeftOut int `json:"announcedLeftOut,omitempty"`
	// routes are the prefixes listed, for /api/bgp (not streamed).
	routes []BGPRoute
}

// BGPSession is one tenant speaker's session with a host.
type BGPSession struct {
	Peer     string    `json:"peer"`
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Received uint32    `json:"received"`
	Since    time.Time `json:"since"`
	// Closed says why the host closed it: "prefix count" or "update
	// rate" (empty: not closed for a bound).
	Closed string `json:"closed,omitempty"`
	// Attachment is the namespace the session is made from (empty: the
	// host's own).
	Attachment string `json:"attachment,omitempty"`
	// BFD is the session's BFD state (with bgp.bfd), BFDReason why it
	// last went down, BFDSince since when the state holds.
	BFD       string     `json:"bfd,omitempty"`
	BFDReason string     `json:"bfdReason,omitempty"`
	BFDSince  *time.Time `json:"bfdSince,omitempty"`
	// Advertised is how many prefixes the host sends the speaker (the
	// VIPs of bgp pools in the tenant's attachment).
	Advertised uint32 `json:"advertised,omitempty"`
}

// BGPAnnounced is a VIP a host announces to a tenant's speakers.
type BGPAnnounced struct {
	Prefix  string `json:"prefix"`
	NextHop string `json:"nextHop"`
}

// announcedMax bounds the VIPs listed per host and tenant on the page.
const announcedMax = 100

// BGPRoute is one prefix a tenant speaker announced to a host.
type BGPRoute struct {
	Node     string `json:"node"`
	Prefix   string `json:"prefix"`
	NextHop  string `json:"nextHop"`
	Peer     string `json:"peer"`
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
	// Stale: the host did not answer this read; the route is as it last
	// reported it, at Observed.
	Stale    bool      `json:"stale,omitempty"`
	Observed time.Time `json:"observed"`
}

// The states the tenant BGP relay gives a session it closed for the
// speaker's prefix count or update rate (vip/tenantbgp), and what the
// page calls them.
var closedStates = map[string]string{"prefix-limit": "prefix count", "update-limit": "update rate"}

// bgpViews is every tenant's BGP from the hosts that answered this read.
func bgpViews(hosts []*pb.HostObservation, now time.Time) []TenantBGP {
	by := map[string]*TenantBGP{}
	var names []string
	for _, h := range hosts {
		if !h.GetReachable() {
			continue
		}
		for _, o := range h.GetTenantBgp() {
			t := by[o.GetTenant()]
			if t == nil {
				t = &TenantBGP{Tenant: o.GetTenant()}
				by[o.GetTenant()] = t
				names = append(names, o.GetTenant())
			}
			v := BGPHost{Node: h.GetNodeId(), Reachable: true, Observed: now, Problem: clip(o.GetProblem()), Sessions: []BGPSession{},
				Accepted: o.GetAcceptedCount(), Dropped: o.GetDroppedCount(), Attachment: clip(o.GetAttachment())}
			if o.GetReannounceSince() != nil {
				since := o.GetReannounceSince().AsTime()
				v.Reannounced, v.ReannounceError, v.ReannounceSince = o.GetReannounced(), clip(o.GetReannounceError()), &since
				v.FabricSessions = o.GetFabricSessions()
			}
			if o.GetAnnounceSince() != nil {
				since := o.GetAnnounceSince().AsTime()
				v.AnnounceSince, v.AnnounceError = &since, clip(o.GetAnnounceError())
				all := o.GetAnnounced()
				v.AnnouncedLeftOut = max(len(all)-announcedMax, 0)
				for _, r := range all[:min(len(all), announcedMax)] {
					v.Announced = append(v.Announced, BGPAnnounced{Prefix: clip(r.GetPrefix()), NextHop: clip(r.GetNextHop())})
				}
			}
			for _, s := range o.GetSessions() {
				c := closedStates[s.GetState()]
				if c != "" {
					v.Closed++
				}
				bs := BGPSession{Peer: clip(s.GetPeer()), State: clip(s.GetState()), Reason: clip(s.GetReason()),
					Received: s.GetReceived(), Since: s.GetSince().AsTime(), Closed: c, BFD: clip(s.GetBfd()), BFDReason: clip(s.GetBfdReason()), Attachment: clip(s.GetAttachment()),
					Advertised: s.GetAdvertised()}
				if s.GetBfdSince() != nil {
					since := s.GetBfdSince().AsTime()
					bs.BFDSince = &since
				}
				v.Sessions = append(v.Sessions, bs)
			}
			for _, r := range o.GetAccepted() {
				v.routes = append(v.routes, BGPRoute{Node: v.Node, Prefix: clip(r.GetPrefix()), NextHop: clip(r.GetNextHop()), Peer: clip(r.GetPeer()), Accepted: true})
			}
			for _, r := range o.GetDropped() {
				v.routes = append(v.routes, BGPRoute{Node: v.Node, Prefix: clip(r.GetPrefix()), NextHop: clip(r.GetNextHop()), Peer: clip(r.GetPeer()), Reason: clip(r.GetReason())})
			}
			v.Listed = len(v.routes)
			t.Hosts = append(t.Hosts, v)
		}
	}
	slices.Sort(names)
	out := make([]TenantBGP, 0, len(names))
	for _, n := range names {
		out = append(out, *by[n])
	}
	return out
}

// keepBGP adds to cur, for each host whose report is not in this read,
// its last report of each tenant's BGP, marked not reachable and keeping
// when it was observed; a host that left the cluster is dropped.
func keepBGP(prev, cur []TenantBGP, answered map[string]bool, why map[string]string, nodes []Node) []TenantBGP {
	return keepPerHost[TenantBGP, BGPHost](prev, cur, answered, why, nodes)
}

// streamedBGP is the tenants' BGP as the stream sends it: at most
// streamSessionsMax sessions per host (those not established first), the
// others counted.
func streamedBGP(in []TenantBGP) []TenantBGP {
	out := make([]TenantBGP, len(in))
	for i, t := range in {
		hosts := make([]BGPHost, len(t.Hosts))
		for j, h := range t.Hosts {
			if len(h.Sessions) > streamSessionsMax {
				ss := slices.Clone(h.Sessions)
				slices.SortStableFunc(ss, func(a, b BGPSession) int {
					return boolRank(a.State != "established") - boolRank(b.State != "established")
				})
				h.SessionsLeftOut = len(ss) - streamSessionsMax
				h.Sessions = ss[:streamSessionsMax]
			}
			hosts[j] = h
		}
		t.Hosts = hosts
		out[i] = t
	}
	return out
}

// boolRank sorts true first.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// RoutePage is one page of a tenant's routes on every host: dropped
// first (with the reason), then accepted, by host and prefix.
type RoutePage struct {
	Tenant string    `json:"tenant"`
	Time   time.Time `json:"time"`
	// Total counts the routes the hosts listed; Matching those the
	// search and the filter keep; Offset is the first row's index.
	Total    int        `json:"total"`
	Matching int        `json:"matching"`
	Offset   int        `json:"offset"`
	Rows     []BGPRoute `json:"rows"`
	// Hosts says, per host, how many routes it has and lists, and how old
	// its report is.
	Hosts []BGPHost `json:"hosts"`
}

// routePage is the page of t's routes from offset (the last page past
// the end) matching the search words and state ("accepted", "dropped").
func routePage(t *TenantBGP, offset, limit int, q, state string) RoutePage {
	var all []BGPRoute
	p := RoutePage{Tenant: t.Tenant, Hosts: []BGPHost{}, Rows: []BGPRoute{}}
	for _, h := range t.Hosts {
		for _, r := range h.routes {
			r.Stale, r.Observed = !h.Reachable, h.Observed
			all = append(all, r)
		}
		h.Sessions, h.routes = nil, nil
		p.Hosts = append(p.Hosts, h)
	}
	slices.SortStableFunc(all, func(a, b BGPRoute) int {
		if a.Accepted != b.Accepted {
			return boolRank(!a.Accepted) - boolRank(!b.Accepted)
		}
		return strings.Compare(a.Node+" "+a.Prefix, b.Node+" "+b.Prefix)
	})
	words := strings.Fields(strings.ToLower(q))
	var match []BGPRoute
	for _, r := range all {
		ok := state == "" || (state == "accepted") == r.Accepted
		text := strings.ToLower(r.Node + " " + r.Prefix + " " + r.NextHop + " " + r.Peer + " " + r.Reason)
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
	p.Total, p.Matching, p.Offset = len(all), len(match), offset
	p.Rows = append(p.Rows, match[offset:min(len(match), offset+limit)]...)
	return p
}

// pageArgs reads offset, limit and q of a paged route; it answers 400
// naming the bound and returns false when one is out of bounds.
func pageArgs(w http.ResponseWriter, r *http.Request) (offset, limit int, q string, ok bool) {
	v := r.URL.Query()
	offset, limit, q = 0, netPageDefault, v.Get("q")
	var err error
	if s := v.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			http.Error(w, "offset must be a row number (0 or more)", http.StatusBadRequest)
			return 0, 0, "", false
		}
	}
	if s := v.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > netPageMax {
			http.Error(w, fmt.Sprintf("limit must be 1 to %d rows (page with offset for more)", netPageMax), http.StatusBadRequest)
			return 0, 0, "", false
		}
	}
	if len(q) > memberQueryMax {
		http.Error(w, fmt.Sprintf("q is %d bytes, at most %d", len(q), memberQueryMax), http.StatusBadRequest)
		return 0, 0, "", false
	}
	return offset, limit, q, true
}

// tenantArg reads ?tenant=, a tenant of the last read; it answers 400
// or 404 and returns nil when there is none.
func (s *Server) tenantArg(w http.ResponseWriter, r *http.Request) (*Snapshot, string) {
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" || len(tenant) > 253 {
		http.Error(w, "tenant must be a tenant's name (at most 253 bytes)", http.StatusBadRequest)
		return nil, ""
	}
	s.mu.Lock()
	snap := s.snap
	s.mu.Unlock()
	if snap == nil {
		http.Error(w, "no snapshot yet: the cluster was not read so far", http.StatusServiceUnavailable)
		return nil, ""
	}
	if !slices.ContainsFunc(snap.Tenants, func(t Tenant) bool { return t.Name == tenant }) &&
		!slices.ContainsFunc(snap.BGP, func(t TenantBGP) bool { return t.Tenant == tenant }) {
		http.Error(w, "no tenant of that name in the last read", http.StatusNotFound)
		return nil, ""
	}
	return snap, tenant
}

// bgp serves /api/bgp?tenant=T&offset=0&limit=100&q=words&state=dropped:
// one page of the routes the tenant's speakers announced to the hosts,
// from the last read.
func (s *Server) bgp(w http.ResponseWriter, r *http.Request) {
	offset, limit, q, ok := pageArgs(w, r)
	if !ok {
		return
	}
	state := r.URL.Query().Get("state")
	if state != "" && state != "accepted" && state != "dropped" {
		http.Error(w, "state must be accepted, dropped or empty", http.StatusBadRequest)
		return
	}
	snap, tenant := s.tenantArg(w, r)
	if snap == nil {
		return
	}
	t := TenantBGP{Tenant: tenant}
	if i := slices.IndexFunc(snap.BGP, func(x TenantBGP) bool { return x.Tenant == tenant }); i >= 0 {
		t = snap.BGP[i]
	}
	p := routePage(&t, offset, limit, q, state)
	p.Time = snap.Time
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(p)
}
