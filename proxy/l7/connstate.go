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
type ConnState struct {
	v atomic.Int32
	// cut is set by Cut; up is the member connection an HTTP/1.x
	// exchange of the connection uses, while it runs.
	cut atomic.Bool
	up  atomic.Pointer[upConn]
}

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

// Cut ends the exchange with a member that the connection's request is
// in, if any, for an owner about to close the connection by force (a
// handover's grace is over, a drain timed out): the member connection is
// shut down, so that the request fails at once instead of when the
// member answers or its timeout passes, and no answer is written for it.
// Closing a bare TCP or TLS client connection waits for the engine to
// leave the socket's read callback, where an HTTP/1.x request without a
// body to stream is served (rawclient.go): without Cut, that close
// would wait for the member. The connection serves no request after it.
func (s *ConnState) Cut() {
	s.cut.Store(true)
	if u := s.up.Load(); u != nil {
		u.shutdown()
	}
}

// use records u as the member connection of the exchange in progress
// (nil when it ends); one taken after a Cut is shut down at once. Cut
// stores before it loads, use too: either Cut sees u or use sees the cut.
func (s *ConnState) use(u *upConn) {
	if s == nil {
		return
	}
	s.up.Store(u)
	if u != nil && s.cut.Load() {
		u.shutdown()
	}
}

// isCut reports whether Cut was called.
func (s *ConnState) isCut() bool { return s != nil && s.cut.Load() }

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
