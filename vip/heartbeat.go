package vip

import (
	"encoding/binary"
	"errors"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// received is one heartbeat as the reader took it off the socket.
type received struct {
	hb *heartbeat
	at time.Time
}

// readHeartbeats reads datagrams until the socket is closed or its read
// deadline passes, and hands the valid ones to the loop.
func (m *Manager) readHeartbeats() {
	buf := make([]byte, maxDatagram+1)
	oob := make([]byte, 128)
	var lastBad time.Time
	for {
		n, oobn, _, from, err := m.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		at := arrival(time.Now(), oob[:oobn])
		m.mu.Lock()
		key := m.key
		m.mu.Unlock()
		if len(key) == 0 {
			continue
		}
		hb, err := parseHeartbeat(buf[:n], key)
		if err != nil {
			if at.Sub(lastBad) > 10*time.Second {
				lastBad = at
				m.log.Warn("dropped a datagram on the heartbeat port", "from", from, "err", err)
			}
			continue
		}
		select {
		case m.recv <- received{hb: hb, at: at}:
		case <-m.stop:
			return
		}
	}
}

// receive takes one heartbeat into the peers' state.
func (m *Manager) receive(r received) {
	st := &m.loop
	hb := r.hb
	if _, ok := st.members[hb.ID]; !ok || hb.ID == m.cfg.NodeID {
		return
	}
	if last, ok := st.lastSeq[hb.ID]; ok && last[0] == hb.Incarnation && hb.Seq <= last[1] {
		return
	}
	st.lastSeq[hb.ID] = [2]uint64{hb.Incarnation, hb.Seq}
	p := st.peers[hb.ID]
	if p == nil {
		p = &peerState{}
		st.peers[hb.ID] = p
	}
	if hb.Leaving {
		if !p.Left {
			m.log.Info("peer is shutting down; taking over its VIPs", "peer", hb.ID)
		}
		p.Left = true
		p.Version++
		return
	}
	wasDead := p.Left || p.Heard.IsZero() || r.at.Sub(p.Heard) >= m.dead
	p.Heard, p.Left = r.at, false
	notReady := map[netip.Addr]bool{}
	for _, a := range hb.NotReady {
		notReady[a] = true
	}
	if p.Eligible != hb.Eligible || p.NotReadyAll != hb.NotReadyAll || !maps.Equal(p.NotReady, notReady) {
		p.Eligible, p.NotReadyAll, p.NotReady = hb.Eligible, hb.NotReadyAll, notReady
		p.Version++
	}
	p.Sightings = hb.Sightings
	if wasDead {
		// Tell it at once that it is heard, so that it counts this host
		// towards its majority without waiting for the next tick.
		m.trigger(r.at)
	}
}

// trigger sends heartbeats now, at most four times per interval.
func (m *Manager) trigger(now time.Time) {
	st := &m.loop
	if now.Sub(st.lastTrigger) < m.cfg.HeartbeatInterval/4 {
		return
	}
	st.lastTrigger = now
	m.sendHeartbeats(now)
}

// sendHeartbeats sends this host's heartbeat to every member.
func (m *Manager) sendHeartbeats(now time.Time) {
	st := &m.loop
	m.mu.Lock()
	key := m.key
	ready, haveReady := m.ready, m.haveReady
	m.mu.Unlock()
	if len(key) == 0 || len(st.members) == 0 {
		return
	}
	st.seq++
	hb := heartbeat{
		ID: m.cfg.NodeID, Incarnation: m.incarnation, Seq: st.seq, Revision: st.revision,
		Eligible: st.eligible && !st.leaving, Leaving: st.leaving,
		NotReadyAll: st.want == nil || !haveReady,
	}
	for _, id := range slices.Sorted(maps.Keys(st.peers)) {
		p := st.peers[id]
		if p.Left || p.Heard.IsZero() || now.Sub(p.Heard) >= m.dead {
			continue
		}
		hb.Sightings = append(hb.Sightings, sighting{ID: id, Age: now.Sub(p.Heard), Eligible: p.Eligible})
	}
	if st.want != nil && haveReady {
		for _, vs := range st.want.VIPs {
			if vs.Mode == ModeARP && notReady(vs, ready, true) != "" {
				hb.NotReady = append(hb.NotReady, vs.Addr)
			}
		}
	}
	b, err := hb.marshal(key)
	if err != nil {
		m.log.Error("encode heartbeat", "err", err)
		return
	}
	for _, id := range slices.Sorted(maps.Keys(st.members)) {
		to := st.members[id].Heartbeat
		_, err := m.conn.WriteToUDPAddrPort(b, to)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != st.sendErrs[id] {
			if msg != "" {
				m.log.Warn("cannot send heartbeats", "peer", id, "addr", to, "err", err)
			} else {
				m.log.Info("sending heartbeats again", "peer", id)
			}
			st.sendErrs[id] = msg
		}
	}
}

// setSocketOptions marks heartbeats as network control traffic (DSCP
// CS6) and asks the kernel to stamp each datagram with its arrival time.
func setSocketOptions(c *net.UDPConn, v4 bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if v4 {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, 0xc0)
		} else {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0xc0)
		}
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
}

// arrival is when a datagram read at now reached the host: the kernel's
// stamp in oob when there is one. A process that was paused (a long
// garbage collection, a starved CPU) then still sees that its peers'
// heartbeats came in time. The result keeps now's monotonic reading.
func arrival(now time.Time, oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return now
	}
	for _, msg := range msgs {
		if msg.Header.Level != unix.SOL_SOCKET || msg.Header.Type != unix.SCM_TIMESTAMPNS || len(msg.Data) != 16 {
			continue
		}
		sec := int64(binary.NativeEndian.Uint64(msg.Data[0:8]))
		nsec := int64(binary.NativeEndian.Uint64(msg.Data[8:16]))
		delay := now.Round(0).Sub(time.Unix(sec, nsec))
		if delay < 0 || delay > time.Minute {
			return now
		}
		return now.Add(-delay)
	}
	return now
}

// watchLinks wakes the loop when an interface this manager uses changes
// state, so that a dead link releases its VIPs without waiting for the
// next lease tick.
func (m *Manager) watchLinks(done <-chan struct{}) {
	names := map[string]bool{}
	for _, f := range m.ifaces() {
		names[f.name] = true
	}
	updates := make(chan netlink.LinkUpdate, 16)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { m.log.Debug("link updates", "err", err) },
	})
	if err != nil {
		m.log.Warn("cannot watch interface state; checking it every second", "err", err)
		return
	}
	go func() {
		for u := range updates {
			if u.Link != nil && names[u.Link.Attrs().Name] {
				m.mu.Lock()
				m.linkChanged = true
				m.mu.Unlock()
				m.poke()
			}
		}
	}()
}
