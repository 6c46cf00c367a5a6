package l7

import "sync/atomic"

// ConnState is what the engine tells the owner of one connection it
// serves (ConnInfo.State), for an owner that must end connections without
// cutting a request, such as a host about to give its VIPs away. A
// connection is busy from its start (its first request is due), idle
// between two HTTP/1.x requests, and upgraded once it carries a WebSocket
// or another upgraded protocol. An HTTP/2 connection stays busy: drained,
// it closes itself once its open streams have ended. The zero value is a
// busy connection.
type ConnState struct{ v atomic.Int32 }

// Connection states.
const (
	stateBusy int32 = iota
	stateIdle
	stateUpgraded
	stateClosed
)

// Busy reports whether the connection serves a request, or has yet to
// send its first one.
func (s *ConnState) Busy() bool { return s.v.Load() == stateBusy }

// Upgraded reports whether the connection carries an upgraded protocol
// (WebSocket): it has no request boundaries left to wait for.
func (s *ConnState) Upgraded() bool { return s.v.Load() == stateUpgraded }

// CloseIfIdle reports whether the connection is idle between two
// HTTP/1.x requests and, if it is, marks it closed: the engine starts no
// request on it any more, and the caller closes it. A connection whose
// next request arrived first stays busy and is not marked.
func (s *ConnState) CloseIfIdle() bool { return s.v.CompareAndSwap(stateIdle, stateClosed) }

// idle marks an HTTP/1.x connection that answered its request and waits
// for the next.
func (s *ConnState) idle() {
	if s != nil {
		s.v.CompareAndSwap(stateBusy, stateIdle)
	}
}

// busy marks the connection busy as its next request arrives; false means
// its owner closed it meanwhile (CloseIfIdle) and no request may start.
func (s *ConnState) busy() bool {
	if s == nil {
		return true
	}
	return s.v.CompareAndSwap(stateIdle, stateBusy) || s.v.Load() == stateBusy
}

// upgraded marks a connection that now carries an upgraded protocol.
func (s *ConnState) upgraded() {
	if s != nil {
		s.v.CompareAndSwap(stateBusy, stateUpgraded)
	}
}
