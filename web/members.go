package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// A load balancer can have thousands of members, each seen by every host.
// The stream sends every host's counts and only the members a summary
// names (down, or carrying traffic); the page reads the member table a
// page at a time from /api/members.
const (
	// streamMembersDown bounds the members down that a host's view of a
	// load balancer carries in the stream (those with traffic are bounded
	// by the host: it reports its 64 busiest).
	streamMembersDown = 64
	// memberPageDefault and memberPageMax: rows of one /api/members page.
	memberPageDefault = 100
	memberPageMax     = 500
	// memberQueryMax bounds the search words of /api/members.
	memberQueryMax = 200
)

// Member states by one host's checks.
const (
	memberUp      = "up"
	memberDown    = "down"
	memberUnknown = "unknown" // the host does not answer
)

// MemberCounts is how many of a load balancer's members one host sees in
// each state.
type MemberCounts struct {
	Up      int `json:"up"`
	Down    int `json:"down"`
	Unknown int `json:"unknown"`
}

func memberState(h *LBHost, m *MemberState) string {
	switch {
	case !h.Reachable:
		return memberUnknown
	case m.Healthy:
		return memberUp
	}
	return memberDown
}

// streamed is the snapshot as the stream sends it: each host's view of a
// load balancer keeps its member counts and, of its members, those down
// (at most streamMembersDown) and those with traffic; the others are
// counted in MembersLeftOut. The snapshot itself is not changed.
func streamed(snap *Snapshot) *Snapshot {
	if snap == nil {
		return nil
	}
	out := *snap
	out.BGP = streamedBGP(snap.BGP)
	out.LBs = make([]LB, len(snap.LBs))
	for i, l := range snap.LBs {
		hosts := make([]LBHost, len(l.Hosts))
		for j, h := range l.Hosts {
			var c MemberCounts
			kept := []MemberState{}
			down := 0
			for k := range h.Members {
				m := &h.Members[k]
				st := memberState(&h, m)
				switch st {
				case memberUp:
					c.Up++
				case memberDown:
					c.Down++
				default:
					c.Unknown++
				}
				if m.Traffic != nil || (st == memberDown && down < streamMembersDown) {
					if st == memberDown {
						down++
					}
					kept = append(kept, *m)
				}
			}
			h.Counts = c
			h.MembersLeftOut = len(h.Members) - len(kept)
			h.Members = kept
			hosts[j] = h
		}
		l.Hosts = hosts
		out.LBs[i] = l
	}
	return &out
}

// MemberPage is one page of a load balancer's member table: each member
// once (pool and address, in the order of the stored object, those down
// on a host first, then those unknown), with its state on every host.
type MemberPage struct {
	LB string `json:"lb"`
	// Time is the snapshot's.
	Time time.Time `json:"time"`
	// Hosts are the hosts reporting the load balancer, in order.
	Hosts []string `json:"hosts"`
	// Total counts every member; Matching those the search and the state
	// filter keep; Offset is the first row's index among them.
	Total    int         `json:"total"`
	Matching int         `json:"matching"`
	Offset   int         `json:"offset"`
	Rows     []MemberRow `json:"rows"`
}

// MemberRow is one member: its weight as stored (absent: default) and
// its state on each host (absent: the host does not report it).
type MemberRow struct {
	Pool    string              `json:"pool"`
	Address string              `json:"address"`
	Weight  *uint32             `json:"weight,omitempty"`
	On      map[string]MemberOn `json:"on"`
}

// MemberOn is a member on one host: its state by the host's checks, why
// it is down, and its traffic where the host reported it.
type MemberOn struct {
	State     string         `json:"state"`
	Reason    string         `json:"reason,omitempty"`
	LastCheck time.Time      `json:"lastCheck"`
	InFlight  int64          `json:"inFlight"`
	Traffic   *MemberTraffic `json:"traffic,omitempty"`
}

// memberIndex is one member in the table's order: enough to sort and
// filter every member; a page's rows are built from it (row).
type memberIndex struct {
	pool, address string
	weight        *uint32
	rank          int    // down 0, unknown 1, up 2, no host 3
	text          string // "pool: address", lower case, for the search
	states        uint8  // the states it has on some host (stateBit)
	// at is its index in each host's Members (-1: not reported).
	at []int32
}

// stateBit is a member state's bit in memberIndex.states.
var stateBit = map[string]uint8{memberUp: 1, memberDown: 2, memberUnknown: 4}

// memberRows joins the hosts' views of the load balancer l (and its
// stored object o, for members no host reports and for weights).
func memberRows(l *LB, o *pb.LoadBalancer) []memberIndex {
	idx := map[[2]string]int{}
	var rows []memberIndex
	row := func(pool, addr string) *memberIndex {
		k := [2]string{pool, addr}
		i, ok := idx[k]
		if !ok {
			i = len(rows)
			idx[k] = i
			at := make([]int32, len(l.Hosts))
			for j := range at {
				at[j] = -1
			}
			rows = append(rows, memberIndex{pool: pool, address: addr, rank: 3, at: at})
		}
		return &rows[i]
	}
	pools := o.GetPools()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, m := range pools[n].GetMembers() {
			r := row(n, m.GetAddress())
			if m.Weight != nil {
				w := m.GetWeight()
				r.weight = &w
			}
		}
	}
	rank := map[string]int{memberDown: 0, memberUnknown: 1, memberUp: 2}
	for j := range l.Hosts {
		h := &l.Hosts[j]
		for k := range h.Members {
			m := &h.Members[k]
			st := memberState(h, m)
			r := row(m.Pool, m.Address)
			r.at[j] = int32(k)
			r.rank = min(r.rank, rank[st])
			r.states |= stateBit[st]
		}
	}
	for i := range rows {
		rows[i].text = strings.ToLower(rows[i].pool + ": " + rows[i].address)
	}
	slices.SortStableFunc(rows, func(a, b memberIndex) int { return cmp.Compare(a.rank, b.rank) })
	return rows
}

// row is the member's row of the table.
func (r *memberIndex) row(l *LB) MemberRow {
	out := MemberRow{Pool: r.pool, Address: r.address, Weight: r.weight, On: map[string]MemberOn{}}
	for j, k := range r.at {
		if k < 0 {
			continue
		}
		h := &l.Hosts[j]
		m := &h.Members[k]
		out.On[h.Node] = MemberOn{State: memberState(h, m), Reason: m.Reason, LastCheck: m.LastCheck, InFlight: m.InFlight, Traffic: m.Traffic}
	}
	return out
}

// memberPage is the page of rows from offset (the last page when offset
// is past the end) of those matching every search word and, with state
// set, in that state on some host.
func memberPage(l *LB, o *pb.LoadBalancer, offset, limit int, q, state string) MemberPage {
	all := memberRows(l, o)
	words := strings.Fields(strings.ToLower(q))
	match := all
	if len(words) > 0 || state != "" {
		match = nil
		for _, r := range all {
			ok := state == "" || r.states&stateBit[state] != 0
			for _, w := range words {
				ok = ok && strings.Contains(r.text, w)
			}
			if ok {
				match = append(match, r)
			}
		}
	}
	if offset >= len(match) {
		offset = max(0, (len(match)-1)/limit*limit)
	}
	p := MemberPage{LB: l.ID, Total: len(all), Matching: len(match), Offset: offset, Hosts: []string{}, Rows: []MemberRow{}}
	for i := offset; i < min(len(match), offset+limit); i++ {
		p.Rows = append(p.Rows, match[i].row(l))
	}
	for _, h := range l.Hosts {
		p.Hosts = append(p.Hosts, h.Node)
	}
	return p
}

// members serves /api/members?lb=tenant/name&offset=0&limit=100&q=words&state=down:
// one page of the load balancer's member table from the last read.
func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lb, state, words := q.Get("lb"), q.Get("state"), q.Get("q")
	offset, limit := 0, memberPageDefault
	var err error
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			http.Error(w, "offset must be a row number (0 or more)", http.StatusBadRequest)
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > memberPageMax {
			http.Error(w, fmt.Sprintf("limit must be 1 to %d rows (page with offset for more)", memberPageMax), http.StatusBadRequest)
			return
		}
	}
	switch {
	case len(lb) > 300 || !strings.Contains(lb, "/"):
		http.Error(w, "lb must be tenant/name (at most 300 bytes)", http.StatusBadRequest)
		return
	case len(words) > memberQueryMax:
		http.Error(w, fmt.Sprintf("q is %d bytes, at most %d", len(words), memberQueryMax), http.StatusBadRequest)
		return
	case state != "" && state != memberUp && state != memberDown && state != memberUnknown:
		http.Error(w, "state must be up, down, unknown or empty", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	snap := s.snap
	s.mu.Unlock()
	if snap == nil {
		http.Error(w, "no snapshot yet: the cluster was not read so far", http.StatusServiceUnavailable)
		return
	}
	i := slices.IndexFunc(snap.LBs, func(l LB) bool { return l.ID == lb })
	if i < 0 {
		http.Error(w, fmt.Sprintf("no load balancer %.200q in the last read", lb), http.StatusNotFound)
		return
	}
	p := memberPage(&snap.LBs[i], snap.objects["LoadBalancer"][lb].GetLoadBalancer(), offset, limit, words, state)
	p.Time = snap.Time
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(p)
}
