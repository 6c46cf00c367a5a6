package dns

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"
)

// Bounds of zone transfers.
const (
	// JournalLen is the number of changes per zone kept for IXFR; a
	// secondary further behind gets the whole zone.
	JournalLen = 64
	// xfrChunk is the records per message of a transfer.
	xfrChunk = 256
	// notifyTries and notifyTimeout bound the NOTIFY sent per change.
	notifyTries   = 3
	notifyTimeout = 2 * time.Second
	// minRefreshGap: copies are compared at most this often, and never
	// more than a fifth of the time (a zone of 20,000 names takes tens of
	// milliseconds), however often readiness flaps.
	minRefreshGap = 100 * time.Millisecond
)

// delta is one change of a zone, for IXFR.
type delta struct {
	from, to uint32
	del, add []mdns.RR
}

// zoneCopy is what a secondary gets of one zone: the records answered
// now (without the SOA), its serial and the changes that led there.
type zoneCopy struct {
	serial  uint32
	soa     *mdns.SOA
	rrs     []mdns.RR
	krs     []keyedRR
	keys    map[string]bool
	journal []delta
}

// transfers keeps each zone's copy for secondaries: the records a query
// would get now, with a serial that increases whenever they change.
type transfers struct {
	mu    sync.Mutex
	zones map[string]*zoneCopy
	// soas are the SOA records queries get (the serial of the copy).
	soas  atomic.Pointer[map[string]*mdns.SOA]
	dirty chan struct{}
	// notify has one channel per secondary: a change pending.
	notify []chan struct{}
	stats  struct {
		Changes, Transfers, Incremental, Refused, Notified atomic.Uint64
	}
}

func newTransfers(cfg Config) *transfers {
	if len(cfg.Secondaries) == 0 {
		return nil
	}
	x := &transfers{zones: map[string]*zoneCopy{}, dirty: make(chan struct{}, 1)}
	for range cfg.Secondaries {
		x.notify = append(x.notify, make(chan struct{}, 1))
	}
	return x
}

// touch asks for the copies to be compared with the answers again.
func (x *transfers) touch() {
	if x == nil {
		return
	}
	select {
	case x.dirty <- struct{}{}:
	default:
	}
}

// zoneSOA is the SOA queries get for zone: that of the copy (nil: the
// table's).
func (s *Server) zoneSOA(zone string) *mdns.SOA {
	if s.xfr == nil {
		return nil
	}
	if m := s.xfr.soas.Load(); m != nil {
		return (*m)[zone]
	}
	return nil
}

// keyedRR is a record and its text, by which copies are compared.
type keyedRR struct {
	key string
	rr  mdns.RR
}

// records returns what queries for zone get now, as a secondary keeps
// it: NS and glue, and every name's working addresses (a name none of
// whose addresses works is left out: a secondary answers it NXDOMAIN
// where this host answers NODATA). Sorted, without repeats; no SOA.
func (t *Table) records(z *zone, s Serving) []keyedRR {
	var out []keyedRR
	put := func(rr mdns.RR) { out = append(out, keyedRR{rr.String(), rr}) }
	for _, rr := range z.ns {
		put(rr)
	}
	for n, addrs := range z.glue {
		for _, a := range addrs {
			put(addrRR(n, a, uint32(InfraTTL/time.Second)))
		}
	}
	out = append(out, t.nameRecords(z, s)...)
	slices.SortFunc(out, func(a, b keyedRR) int { return strings.Compare(a.key, b.key) })
	return slices.CompactFunc(out, func(a, b keyedRR) bool { return a.key == b.key })
}

// nameRecords are the A and AAAA records of zone's names (exact and
// wildcard) whose addresses work now, by the answer rule; unsorted.
func (t *Table) nameRecords(z *zone, s Serving) []keyedRR {
	var out []keyedRR
	add := func(name string, ts []Target) {
		if t.zoneOf(name) != z {
			return
		}
		for i, tg := range ts {
			if s.Serves(tg) != "" || seenAddr(ts[:i], tg.Addr, s) {
				continue
			}
			rr := addrRR(name, tg.Addr, t.ttl)
			out = append(out, keyedRR{rr.String(), rr})
		}
	}
	for n, ts := range t.names {
		add(n, ts)
	}
	for n, ts := range t.wild {
		add("*."+n, ts)
	}
	return out
}

// refresh compares each zone's copy with what is answered now and, where
// it differs, takes the new records under a greater serial, journals the
// change and has the secondaries notified.
func (s *Server) refresh() {
	x := s.xfr
	t := s.table.Load()
	x.mu.Lock()
	changed := false
	soas := map[string]*mdns.SOA{}
	for _, z := range t.zones {
		if s.sec != nil && s.sec.zones[z.name] {
			// Signed zones are not transferred: a secondary would
			// answer them unsigned (DESIGN.md, "DNSSEC").
			continue
		}
		krs := t.records(z, s)
		keys := make(map[string]bool, len(krs))
		rrs := make([]mdns.RR, len(krs))
		for i, kr := range krs {
			keys[kr.key], rrs[i] = true, kr.rr
		}
		old := x.zones[z.name]
		if old != nil && sameKeys(old.keys, keys) && old.soa.Minttl == z.soa.Minttl && old.soa.Ns == z.soa.Ns {
			soas[z.name] = old.soa
			continue
		}
		nc := &zoneCopy{rrs: rrs, krs: krs, keys: keys, serial: nextSerial(old, s.now())}
		soa := *z.soa
		soa.Serial = nc.serial
		nc.soa = &soa
		if old != nil {
			d := delta{from: old.serial, to: nc.serial}
			for _, kr := range old.krs {
				if !keys[kr.key] {
					d.del = append(d.del, kr.rr)
				}
			}
			for _, kr := range krs {
				if !old.keys[kr.key] {
					d.add = append(d.add, kr.rr)
				}
			}
			nc.journal = append(old.journal, d)
			if len(nc.journal) > JournalLen {
				nc.journal = slices.Clone(nc.journal[len(nc.journal)-JournalLen:])
			}
			changed = true
		}
		x.zones[z.name] = nc
		soas[z.name] = nc.soa
	}
	x.soas.Store(&soas)
	x.mu.Unlock()
	if changed {
		x.stats.Changes.Add(1)
		for _, ch := range x.notify {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func sameKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// nextSerial is the serial of a new copy: the time in tenths of a second
// (wrapping, as RFC 1982 serial arithmetic allows), or one more than the
// last when that is not greater. Copies change at most every
// minRefreshGap, so the serial never runs ahead of the clock and keeps
// increasing across restarts.
func nextSerial(old *zoneCopy, now time.Time) uint32 {
	next := uint32(now.UnixMilli() / int64(minRefreshGap/time.Millisecond))
	if old == nil {
		return next
	}
	if int32(next-old.serial) <= 0 {
		return old.serial + 1
	}
	return next
}

// xfrLoop keeps the copies and sends NOTIFY until ctx ends.
func (s *Server) xfrLoop(ctx context.Context) {
	for i, sec := range s.cfg.Secondaries {
		go s.notifyLoop(ctx, sec, s.xfr.notify[i])
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.xfr.dirty:
		}
		start := time.Now()
		s.refresh()
		gap := max(minRefreshGap, 4*time.Since(start))
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
	}
}

// notifyLoop tells sec of every zone's new serial when a change is
// pending, over UDP, signed with its key, retried notifyTries times.
func (s *Server) notifyLoop(ctx context.Context, sec Secondary, ch chan struct{}) {
	c := &mdns.Client{Net: "udp", Timeout: notifyTimeout, TsigSecret: map[string]string{sec.Key: s.cfg.TSIGKeys[sec.Key]}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		for _, z := range s.cfg.Zones {
			soa := s.zoneSOA(mdns.CanonicalName(z))
			if soa == nil {
				continue
			}
			m := new(mdns.Msg)
			m.SetNotify(soa.Hdr.Name)
			m.Answer = []mdns.RR{soa}
			for try := 0; try < notifyTries && ctx.Err() == nil; try++ {
				m.SetTsig(sec.Key, mdns.HmacSHA256, 300, time.Now().Unix())
				r, _, err := c.ExchangeContext(ctx, m, sec.Addr.String())
				if err == nil {
					// Any answer: the secondary got it (NOTAUTH: it does
					// not keep that zone; retrying would not change it).
					if r.Rcode == mdns.RcodeSuccess {
						s.xfr.stats.Notified.Add(1)
					} else {
						s.log.Debug("NOTIFY refused", "secondary", sec.Addr, "zone", soa.Hdr.Name, "rcode", mdns.RcodeToString[r.Rcode])
					}
					break
				}
				s.log.Debug("NOTIFY not answered", "secondary", sec.Addr, "zone", soa.Hdr.Name, "err", err)
			}
		}
	}
}

// transferAllowed says whether req, from src, is signed by the key of a
// secondary at that address: 0 when it is, else the rcode to refuse it
// with (REFUSED: not a secondary, or unsigned; NOTAUTH: a bad signature).
func (s *Server) transferAllowed(w mdns.ResponseWriter, req *mdns.Msg, src netip.Addr) int {
	tsig := req.IsTsig()
	listed := false
	for _, sec := range s.cfg.Secondaries {
		if sec.Addr.Addr() != src.Unmap() {
			continue
		}
		listed = true
		if tsig != nil && strings.EqualFold(tsig.Hdr.Name, sec.Key) && strings.EqualFold(tsig.Algorithm, mdns.HmacSHA256) && w.TsigStatus() == nil {
			return 0
		}
	}
	switch {
	case !listed || tsig == nil:
		return mdns.RcodeRefused
	}
	return mdns.RcodeNotAuth
}

// serveTransfer answers AXFR and IXFR (true), or leaves req to Answer.
func (s *Server) serveTransfer(w mdns.ResponseWriter, req *mdns.Msg) bool {
	if s.xfr == nil || req.Opcode != mdns.OpcodeQuery || len(req.Question) != 1 {
		return false
	}
	q := req.Question[0]
	if q.Qtype != mdns.TypeAXFR && q.Qtype != mdns.TypeIXFR {
		return false
	}
	src, tcp := remoteAddr(w)
	refuse := func(rcode int) bool {
		s.xfr.stats.Refused.Add(1)
		m := new(mdns.Msg)
		m.SetRcode(req, rcode)
		if rcode != mdns.RcodeRefused || req.IsTsig() == nil || w.TsigStatus() != nil {
			_ = w.WriteMsg(m)
			return true
		}
		s.sign(m, req)
		_ = w.WriteMsg(m)
		return true
	}
	if rc := s.transferAllowed(w, req, src); rc != 0 {
		return refuse(rc)
	}
	s.xfr.mu.Lock()
	zc := s.xfr.zones[strings.ToLower(q.Name)]
	s.xfr.mu.Unlock()
	if zc == nil || q.Qclass != mdns.ClassINET {
		return refuse(mdns.RcodeNotAuth)
	}
	var have uint32
	ixfr := q.Qtype == mdns.TypeIXFR && len(req.Ns) == 1
	if ixfr {
		soa, ok := req.Ns[0].(*mdns.SOA)
		if !ok {
			return refuse(mdns.RcodeFormatError)
		}
		have = soa.Serial
	}
	if !tcp {
		if !ixfr {
			return refuse(mdns.RcodeRefused)
		}
		// IXFR over UDP: the SOA alone; a secondary behind comes over TCP.
		m := new(mdns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		m.Answer = []mdns.RR{zc.soa}
		s.sign(m, req)
		_ = w.WriteMsg(m)
		return true
	}
	var incremental bool
	rrs := transferRecords(zc, ixfr, have, &incremental)
	s.xfr.stats.Transfers.Add(1)
	if incremental {
		s.xfr.stats.Incremental.Add(1)
	}
	ch := make(chan *mdns.Envelope)
	tr := new(mdns.Transfer)
	done := make(chan error, 1)
	go func() { done <- tr.Out(w, req, ch) }()
	for i := 0; i < len(rrs); i += xfrChunk {
		select {
		case ch <- &mdns.Envelope{RR: rrs[i:min(i+xfrChunk, len(rrs))]}:
		case err := <-done:
			s.log.Debug("zone transfer ended", "zone", q.Name, "err", err)
			return true
		}
	}
	close(ch)
	<-done
	return true
}

// transferRecords is the answer section of a transfer: the whole zone
// between two SOAs (AXFR, or IXFR from a serial the journal no longer
// holds), the SOA alone (IXFR from the current serial or later), or the
// changes since have (IXFR).
func transferRecords(zc *zoneCopy, ixfr bool, have uint32, incremental *bool) []mdns.RR {
	if ixfr {
		if int32(have-zc.serial) >= 0 {
			return []mdns.RR{zc.soa}
		}
		i := slices.IndexFunc(zc.journal, func(d delta) bool { return d.from == have })
		if i >= 0 {
			*incremental = true
			out := []mdns.RR{zc.soa}
			for _, d := range zc.journal[i:] {
				out = append(out, soaAt(zc.soa, d.from))
				out = append(out, d.del...)
				out = append(out, soaAt(zc.soa, d.to))
				out = append(out, d.add...)
			}
			return append(out, zc.soa)
		}
	}
	out := make([]mdns.RR, 0, len(zc.rrs)+2)
	out = append(out, zc.soa)
	out = append(out, zc.rrs...)
	return append(out, zc.soa)
}

func soaAt(soa *mdns.SOA, serial uint32) *mdns.SOA {
	c := *soa
	c.Serial = serial
	return &c
}

// sign signs the response m to a request signed with a key of ours.
func (s *Server) sign(m, req *mdns.Msg) {
	if t := req.IsTsig(); t != nil {
		if _, ok := s.cfg.TSIGKeys[strings.ToLower(t.Hdr.Name)]; ok {
			m.SetTsig(t.Hdr.Name, t.Algorithm, t.Fudge, time.Now().Unix())
		}
	}
}

func remoteAddr(w mdns.ResponseWriter) (netip.Addr, bool) {
	switch a := w.RemoteAddr().(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), true
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), false
	}
	return netip.Addr{}, false
}
