package vip

import (
	"path/filepath"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsLinks watches the links inside the tenants' attachment namespaces
// that pools live in, one netlink subscription per namespace: a netlink
// socket hears the changes of the namespace it was made in only, so the
// host's subscription (watchLinks) never sees the attachments' devices.
// A device of a pool's attachment that goes down or up wakes the loop at
// once, as an interface of the host's does; the check of the links every
// second (checkPoolIfaces) still reads them all.
//
// The loop owns it: checkPoolIfaces, which runs on every new state and
// at every check of the links, brings the subscriptions up to the
// namespaces the pools name (sync). A subscription ends when no pool
// lives in its namespace any more, when the namespace is gone from its
// path or another one is bound there (an open socket keeps a namespace
// alive, so one deleted under the watch is let go at the next check), and
// when Run returns. One whose socket failed is made again at the next
// check, never sooner.
type nsLinks struct {
	m *Manager
	// subs are the subscriptions, by the namespace's path; nil while Run
	// does not run (sync then does nothing).
	subs map[string]*nsSub
	// failed: the last error of subscribing to a namespace, by path.
	failed map[string]string
	// live counts the subscriptions whose reader has not ended; made
	// counts those made.
	live, made atomic.Int64
}

// nsSub is the subscription to one namespace's links.
type nsSub struct {
	id    nsID
	stop  chan struct{} // closed to end it: netlink closes the socket
	ended chan struct{} // closed when its reader has read the last update
}

// nsID tells a namespace from another bound at the same path later.
type nsID struct{ dev, ino uint64 }

// open lets sync subscribe, until close.
func (w *nsLinks) open(m *Manager) {
	w.m, w.subs, w.failed = m, map[string]*nsSub{}, map[string]string{}
}

// close ends every subscription and waits for their readers.
func (w *nsLinks) close() {
	for _, s := range w.subs {
		s.end()
	}
	for _, s := range w.subs {
		<-s.ended
	}
	w.subs = nil
}

// sync subscribes to the links of each namespace in paths that exists
// and ends the other subscriptions.
func (w *nsLinks) sync(paths map[string]bool) {
	if w.subs == nil {
		return
	}
	for path, s := range w.subs {
		if !paths[path] {
			s.end()
			delete(w.subs, path)
		}
	}
	for path := range paths {
		id, ok := boundNamespace(path)
		s := w.subs[path]
		if s != nil && (!ok || s.id != id || s.over()) {
			s.end()
			delete(w.subs, path)
			s = nil
		}
		if s != nil || !ok {
			continue
		}
		err := w.subscribe(path)
		switch {
		case err == nil:
			delete(w.failed, path)
		case w.failed[path] != err.Error():
			// Said once for each new error: it is tried again at each check.
			w.failed[path] = err.Error()
			w.m.log.Warn("cannot watch the links of a namespace; checking them every second", "namespace", filepath.Base(path), "err", err)
		}
	}
	for path := range w.failed {
		if !paths[path] {
			delete(w.failed, path)
		}
	}
}

// over reports whether the subscription's reader ended (its socket
// failed, or it was ended).
func (s *nsSub) over() bool {
	select {
	case <-s.ended:
		return true
	default:
		return false
	}
}

// end ends the subscription (its reader ends once the socket is
// closed).
func (s *nsSub) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
}

// boundNamespace returns the identity of the network namespace bound at
// path; false when there is none.
func boundNamespace(path string) (nsID, bool) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return nsID{}, false
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, false
	}
	return nsID{dev: st.Dev, ino: st.Ino}, true
}

// subscribe subscribes to the links of the namespace at path: an update
// of an interface a pool uses there wakes the loop, as watchLinks does
// for the host's.
func (w *nsLinks) subscribe(path string) error {
	m := w.m
	h, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer h.Close() // the socket keeps the namespace
	var st unix.Stat_t
	if err := unix.Fstat(int(h), &st); err != nil {
		return err
	}
	s := &nsSub{id: nsID{dev: st.Dev, ino: st.Ino}, stop: make(chan struct{}), ended: make(chan struct{})}
	updates := make(chan netlink.LinkUpdate, 16)
	err = netlink.LinkSubscribeWithOptions(updates, s.stop, netlink.LinkSubscribeOptions{
		Namespace: &h,
		ErrorCallback: func(err error) {
			select {
			case <-s.stop: // the socket was closed to end it
			default:
				m.log.Debug("link updates", "namespace", filepath.Base(path), "err", err)
			}
		},
	})
	if err != nil {
		close(s.stop)
		return err
	}
	w.subs[path] = s
	w.made.Add(1)
	w.live.Add(1)
	go func() {
		defer close(s.ended)
		defer w.live.Add(-1)
		// Netlink closes updates once the socket is closed or failed.
		for u := range updates {
			if u.Link != nil && m.pools.hasIn(u.Link.Attrs().Name, path) {
				m.mu.Lock()
				m.linkChanged = true
				m.mu.Unlock()
				m.pokeAll()
			}
		}
	}()
	return nil
}
