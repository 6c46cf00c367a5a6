package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	"github.com/teapot-lb/teapot-lb/api/manifest"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// History answers are cached this long, so pages opened together, or
// reloaded, ask the hosts once; at most historyCacheSize answers are kept.
const (
	historyCacheFor  = 5 * time.Second
	historyCacheSize = 64
)

// History is the hosts' history rings (`/api/history`): a load
// balancer's series summed over the hosts, point by point (the hosts
// sample on the same multiples of 10 s), and each host's own series.
type History struct {
	// Time is when the hosts were asked.
	Time time.Time `json:"time"`
	// LB is the load balancer's series, oldest first (empty without lb).
	LB []Point `json:"lb"`
	// Hosts is each host's own series (all its load balancers, with its
	// CPU and memory).
	Hosts map[string][]Point `json:"hosts"`
	// Missing names the hosts whose history is not in the answer, and why.
	Missing []string `json:"missing"`
	// IntervalSeconds is the rings' resolution.
	IntervalSeconds uint32 `json:"intervalSeconds"`
}

func historyPoint(p *pb.HistoryPoint) Point {
	return Point{Time: p.GetTime().AsTime(), RPS: p.GetRequestsPerSecond(), Errors: p.GetErrorShare(), P99: p.GetP99Seconds(),
		Active: p.GetActiveConnections(), Hosts: 1, CPS: p.GetConnectionsPerSecond(), BytesIn: p.GetBytesInPerSecond(),
		BytesOut: p.GetBytesOutPerSecond(), CPU: p.GetCpu(), Memory: p.GetMemoryBytes()}
}

// mergeHistory builds a History from an observation that asked for it.
func mergeHistory(obs *pb.ObserveResponse, lb string, now time.Time) *History {
	out := &History{Time: now, LB: []Point{}, Hosts: map[string][]Point{}, Missing: []string{}}
	byTime := map[int64]*Point{}
	for _, h := range obs.GetHosts() {
		id := h.GetNodeId()
		if !h.GetReachable() {
			out.Missing = append(out.Missing, id+": did not answer ("+orText(h.GetError(), "no reason given")+")")
			continue
		}
		if len(h.GetHistory()) == 0 {
			out.Missing = append(out.Missing, id+": keeps no history (an earlier release)")
			continue
		}
		for _, s := range h.GetHistory() {
			out.IntervalSeconds = max(out.IntervalSeconds, s.GetIntervalSeconds())
			switch s.GetLoadBalancer() {
			case "":
				ps := make([]Point, 0, len(s.GetPoints()))
				for _, p := range s.GetPoints() {
					ps = append(ps, historyPoint(p))
				}
				out.Hosts[id] = ps
			case lb:
				for _, p := range s.GetPoints() {
					hp := historyPoint(p)
					t := hp.Time.Unix()
					m := byTime[t]
					if m == nil {
						hp.CPU, hp.Memory = 0, 0
						byTime[t] = &hp
						continue
					}
					errs := m.Errors*m.RPS + hp.Errors*hp.RPS
					m.RPS += hp.RPS
					if m.RPS > 0 {
						m.Errors = errs / m.RPS
					}
					m.P99 = max(m.P99, hp.P99)
					m.Active += hp.Active
					m.CPS += hp.CPS
					m.BytesIn += hp.BytesIn
					m.BytesOut += hp.BytesOut
					m.Hosts++
				}
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(byTime)) {
		out.LB = append(out.LB, *byTime[t])
	}
	slices.Sort(out.Missing)
	return out
}

type cached struct {
	at   time.Time
	body []byte
}

// historyCache holds recent answers of /api/history.
type historyCache struct {
	mu sync.Mutex
	m  map[string]cached
	// one serialises the reads of the hosts' rings.
	one sync.Mutex
}

// history serves /api/history?lb=tenant/name: the load balancer's series
// and every host's; without lb, the hosts' series only.
func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	lb := r.URL.Query().Get("lb")
	if len(lb) > 300 || (lb != "" && !strings.Contains(lb, "/")) {
		http.Error(w, "lb must be tenant/name (at most 300 bytes)", http.StatusBadRequest)
		return
	}
	body, err := s.historyBody(r.Context(), lb)
	if err != nil {
		http.Error(w, "cannot read the hosts' history: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

func (s *Server) historyBody(ctx context.Context, lb string) ([]byte, error) {
	c := &s.histCache
	c.one.Lock()
	defer c.one.Unlock()
	now := s.cfg.Now()
	c.mu.Lock()
	if e, ok := c.m[lb]; ok && now.Sub(e.at) < historyCacheFor {
		c.mu.Unlock()
		return e.body, nil
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	obs, err := s.cfg.Source.Observe(ctx, &pb.ObserveRequest{LoadBalancer: lb, History: true, MaxEvents: 1})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(mergeHistory(obs, lb, now))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= historyCacheSize {
		c.m = map[string]cached{}
	}
	c.m[lb] = cached{at: now, body: body}
	return body, nil
}

// ObjectView is one stored object as `teapot-lb get -o yaml` prints it.
type ObjectView struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	YAML string `json:"yaml"`
	// ReadAt is when the dashboard read the object (the last read whose
	// lists succeeded).
	ReadAt   time.Time `json:"readAt"`
	Revision uint64    `json:"revision"`
}

// object serves /api/object?kind=LoadBalancer&name=tenant/name: the
// object of the last read as YAML, secrets left out as `get` leaves them.
func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	kind, name := r.URL.Query().Get("kind"), r.URL.Query().Get("name")
	s.mu.Lock()
	snap := s.snap
	s.mu.Unlock()
	if snap == nil {
		http.Error(w, "no snapshot yet: the cluster was not read so far", http.StatusServiceUnavailable)
		return
	}
	o := snap.objects[kind][name]
	if o == nil {
		http.Error(w, fmt.Sprintf("no %s named %.200q in the last read", kind, name), http.StatusNotFound)
		return
	}
	var b bytes.Buffer
	if err := manifest.Encode(&b, []*pb.Object{api.RedactSecrets(o)}, manifest.FormatYAML); err != nil {
		http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(ObjectView{Kind: kind, Name: name, YAML: b.String(), ReadAt: snap.objectsAt, Revision: snap.Revision})
}
