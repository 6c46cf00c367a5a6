package dns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Bounds of RFC 2136 pushes (--dns-push).
const (
	// MaxPushRecords is the records (deleted or added) per UPDATE message.
	MaxPushRecords = 100
	// PushResync is how often the primary's records are read again
	// (AXFR) and set right, whatever this host believes it pushed.
	PushResync = 10 * time.Minute
	// pushCoalesce: changes within it go out in one push.
	pushCoalesce = 200 * time.Millisecond
	// pushBackoffMin and pushBackoffMax bound the wait after a failure.
	pushBackoffMin = time.Second
	pushBackoffMax = time.Minute
	// pushTimeout bounds one exchange with the primary.
	pushTimeout = 5 * time.Second
	// pushPoll: how often a host looks whether it should push (leadership)
	// and whether a retry or a resync is due.
	pushPoll = time.Second
)

// ErrPush is the error of a push the primary refused or did not answer.
var ErrPush = errors.New("dns push failed")

// PushStatus is what one zone's push did, for explain and metrics.
type PushStatus struct {
	Zone, Server, Key string
	// Active: this host pushes (it leads the cluster).
	Active bool
	// Records is the A and AAAA records on the primary as last read or
	// pushed (0 until the first resync).
	Records int
	// Pushed counts the records deleted and added; Updates the UPDATE
	// messages the primary accepted; Failures the pushes that failed.
	Pushed, Updates, Failures uint64
	LastSuccess, LastErrorAt  time.Time
	LastError                 string
}

// pusher keeps one zone in step on its primary.
type pusher struct {
	p      Push
	secret string
	dirty  chan struct{}
	// known is what the primary holds, by key (nil: not known: read it).
	known map[string]mdns.RR
	mu    sync.Mutex
	st    PushStatus
}

func newPushers(cfg Config) []*pusher {
	var out []*pusher
	for _, p := range cfg.Push {
		out = append(out, &pusher{p: p, secret: cfg.TSIGKeys[p.Key], dirty: make(chan struct{}, 1),
			st: PushStatus{Zone: p.Zone, Server: p.Server.String(), Key: p.Key}})
	}
	return out
}

// touch has the copies for secondaries and the pushes compared with the
// answers again.
func (s *Server) touch() {
	s.xfr.touch()
	for _, pu := range s.push {
		select {
		case pu.dirty <- struct{}{}:
		default:
		}
	}
}

// PushStatus returns the state of every --dns-push zone.
func (s *Server) PushStatus() []PushStatus {
	if s == nil {
		return nil
	}
	var out []PushStatus
	for _, pu := range s.push {
		pu.mu.Lock()
		out = append(out, pu.st)
		pu.mu.Unlock()
	}
	return out
}

// pushLoop keeps pu's zone on its primary until ctx ends: while this host
// leads, each change is pushed as the difference (coalesced over
// pushCoalesce), and the primary's records are read and set right at
// start, on becoming leader, after a failure and every PushResync.
func (s *Server) pushLoop(ctx context.Context, pu *pusher) {
	tick := time.NewTicker(pushPoll)
	defer tick.Stop()
	pending, backoff := true, time.Duration(0)
	var retryAt, resyncAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-pu.dirty:
			pending = true
		case <-tick.C:
		}
		leader := s.cfg.Leader == nil || s.cfg.Leader()
		pu.mu.Lock()
		pu.st.Active = leader
		pu.mu.Unlock()
		if !leader {
			// Another host pushes; when this one leads again it reads
			// what the primary holds first.
			pu.known = nil
			continue
		}
		now := time.Now()
		full := pu.known == nil || !now.Before(resyncAt)
		if !(pending || full) || now.Before(retryAt) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pushCoalesce):
		}
		select {
		case <-pu.dirty:
		default:
		}
		pending = false
		err := s.pushOnce(ctx, pu, full)
		if ctx.Err() != nil {
			return
		}
		pu.mu.Lock()
		if err != nil {
			backoff = min(max(2*backoff, pushBackoffMin), pushBackoffMax)
			retryAt, pending, pu.known = time.Now().Add(backoff), true, nil
			pu.st.Failures++
			pu.st.LastError, pu.st.LastErrorAt = err.Error(), time.Now()
			s.log.Warn("DNS push failed", "zone", pu.p.Zone, "server", pu.p.Server, "retry-in", backoff, "err", err)
		} else {
			backoff = 0
			pu.st.LastSuccess, pu.st.Records = time.Now(), len(pu.known)
			if full {
				resyncAt = time.Now().Add(PushResync)
			}
		}
		pu.mu.Unlock()
	}
}

// pushOnce sends the primary the difference between what it holds and
// what is answered now: deletes first, then additions, at most
// MaxPushRecords a message. With full (or nothing known) it reads the
// primary's zone first (AXFR with the same key).
func (s *Server) pushOnce(ctx context.Context, pu *pusher, full bool) error {
	t := s.table.Load()
	var z *zone
	for _, tz := range t.zones {
		if tz.name == pu.p.Zone {
			z = tz
		}
	}
	if z == nil {
		return fmt.Errorf("zone %s is not served: %w", pu.p.Zone, ErrPush)
	}
	want := map[string]mdns.RR{}
	for _, kr := range t.nameRecords(z, s) {
		want[pushKey(kr.rr)] = kr.rr
	}
	if full || pu.known == nil {
		have, err := s.readPrimary(ctx, pu)
		if err != nil {
			return err
		}
		pu.known = have
	}
	var del, add []mdns.RR
	for k, rr := range pu.known {
		if _, ok := want[k]; !ok {
			del = append(del, rr)
		}
	}
	for k, rr := range want {
		if _, ok := pu.known[k]; !ok {
			add = append(add, rr)
		}
	}
	order := func(a, b mdns.RR) int { return strings.Compare(pushKey(a), pushKey(b)) }
	slices.SortFunc(del, order)
	slices.SortFunc(add, order)
	c := &mdns.Client{Net: "tcp", Timeout: pushTimeout, TsigSecret: map[string]string{pu.p.Key: pu.secret}}
	send := func(rrs []mdns.RR, remove bool) error {
		for i := 0; i < len(rrs); i += MaxPushRecords {
			chunk := rrs[i:min(i+MaxPushRecords, len(rrs))]
			m := new(mdns.Msg)
			m.SetUpdate(pu.p.Zone)
			cp := make([]mdns.RR, len(chunk))
			for j, rr := range chunk {
				cp[j] = mdns.Copy(rr)
			}
			if remove {
				m.Remove(cp)
			} else {
				m.Insert(cp)
			}
			m.SetTsig(pu.p.Key, mdns.HmacSHA256, 300, time.Now().Unix())
			r, _, err := c.ExchangeContext(ctx, m, pu.p.Server.String())
			if err != nil {
				return fmt.Errorf("update of %s at %s%s: %w: %w", pu.p.Zone, pu.p.Server, keyHint(err, pu.p.Key), ErrPush, err)
			}
			if r.Rcode != mdns.RcodeSuccess {
				return fmt.Errorf("update of %s at %s: the primary answered %s: %w", pu.p.Zone, pu.p.Server, rcodeText(r), ErrPush)
			}
			for _, rr := range chunk {
				if remove {
					delete(pu.known, pushKey(rr))
				} else {
					pu.known[pushKey(rr)] = rr
				}
			}
			pu.mu.Lock()
			pu.st.Pushed += uint64(len(chunk))
			pu.st.Updates++
			pu.mu.Unlock()
		}
		return nil
	}
	if err := send(del, true); err != nil {
		return err
	}
	return send(add, false)
}

// readPrimary reads the A and AAAA records of pu's zone from the primary
// (AXFR signed with the push key), but the addresses of the zone's name
// servers (glue, not ours).
func (s *Server) readPrimary(ctx context.Context, pu *pusher) (map[string]mdns.RR, error) {
	m := new(mdns.Msg)
	m.SetAxfr(pu.p.Zone)
	m.SetTsig(pu.p.Key, mdns.HmacSHA256, 300, time.Now().Unix())
	d := &mdns.Client{Net: "tcp", Timeout: pushTimeout}
	conn, err := d.DialContext(ctx, pu.p.Server.String())
	if err != nil {
		return nil, fmt.Errorf("read %s from %s (AXFR): %w: %w", pu.p.Zone, pu.p.Server, ErrPush, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(pushTimeout))
	tr := &mdns.Transfer{Conn: conn, TsigSecret: map[string]string{pu.p.Key: pu.secret}}
	ch, err := tr.In(m, pu.p.Server.String())
	if err != nil {
		return nil, fmt.Errorf("read %s from %s (AXFR): %w: %w", pu.p.Zone, pu.p.Server, ErrPush, err)
	}
	var rrs []mdns.RR
	for env := range ch {
		if env.Error != nil {
			hint := keyHint(env.Error, pu.p.Key)
			if hint == "" {
				hint = fmt.Sprintf(" (the zone needs allow-transfer { key %s; } and allow-update { key %[1]s; })", strings.TrimSuffix(pu.p.Key, "."))
			}
			return nil, fmt.Errorf("read %s from %s by AXFR%s: %w: %w", pu.p.Zone, pu.p.Server, hint, ErrPush, env.Error)
		}
		rrs = append(rrs, env.RR...)
	}
	ns := map[string]bool{}
	for _, rr := range rrs {
		if n, ok := rr.(*mdns.NS); ok {
			ns[strings.ToLower(n.Ns)] = true
		}
	}
	out := map[string]mdns.RR{}
	for _, rr := range rrs {
		h := rr.Header()
		if (h.Rrtype == mdns.TypeA || h.Rrtype == mdns.TypeAAAA) && !ns[strings.ToLower(h.Name)] {
			out[pushKey(rr)] = rr
		}
	}
	return out, nil
}

// keyHint names the key when the primary refused its signature.
func keyHint(err error, key string) string {
	if errors.Is(err, mdns.ErrAuth) || errors.Is(err, mdns.ErrSig) {
		return fmt.Sprintf(": the primary refused the TSIG key %s: give it the same secret as --dns-tsig-keys", strings.TrimSuffix(key, "."))
	}
	return ""
}

// pushKey compares records of the primary and of the table.
func pushKey(rr mdns.RR) string { return strings.ToLower(rr.String()) }

func rcodeText(r *mdns.Msg) string {
	txt := mdns.RcodeToString[r.Rcode]
	if t := r.IsTsig(); t != nil && t.Error != 0 {
		txt += " (TSIG " + mdns.RcodeToString[int(t.Error)] + ")"
	}
	return txt
}
