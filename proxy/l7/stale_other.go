//go:build !linux

package l7

// closedByPeer cannot peek on this platform; a failed reuse is retried.
func (u *upConn) closedByPeer() bool { return false }
