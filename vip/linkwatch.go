package vip

import (
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsLinks watches the links this manager uses, one netlink subscription
// per network namespace: the host's (path "", hostLinks: the VIP
// interfaces and the pools' interfaces there) and each tenant's
// attachment namespace that pools live in. A netlink socket hears the
// changes of the namespace it was made in only. A device that goes down
// or up wakes the loop at once, so that a dead link releases its VIPs
// without waiting for the check of the links every second
// (checkPoolIfaces, checkLinks), which still reads them all.
//
// The loop owns it: Run subscribes to the host's namespace, and
// checkPoolIfaces, which runs on every new state and at every check of
// the links, brings the subscriptions up to the namespaces the pools name
// (sync). A subscription ends when no pool lives in its namespace any
// more, when the namespace is gone from its path or another one is bound
// there (an open socket keeps a namespace alive, so one deleted under the
// watch is let go at the next check), and when Run returns. One whose
// socket failed (the kernel drops a subscriber that cannot keep up with
// a burst of changes) is made again at the next check, never sooner; that
// check reads every link, so no change it missed stays unseen.
type nsLinks struct {
	m *Manager
	// mu guards subs, which the loop changes and tests read.
	mu sync.Mutex
	// subs are the subscriptions, by the namespace's path ("" the
	// host's); nil while Run does not run (sync then does nothing).
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

// hostLinks is the path nsLinks keeps the host's own namespace under.
const hostLinks = ""

// open lets sync subscribe, until close, and subscribes to the host's
// namespace.
func (w *nsLinks) open(m *Manager) {
	w.mu.Lock()
	w.m, w.subs, w.failed = m, map[string]*nsSub{}, map[string]string{}
	w.mu.Unlock()
	w.sync(map[string]bool{hostLinks: true})
}

// close ends every subscription and waits for their readers.
func (w *nsLinks) close() {
	w.mu.Lock()
	subs := w.subs
	w.subs = nil
	w.mu.Unlock()
	for _, s := range subs {
		s.end()
	}
	for _, s := range subs {
		<-s.ended
	}
}

// sync subscribes to the links of each namespace in paths that exists
// and ends the other subscriptions.
func (w *nsLinks) sync(paths map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
		id, ok := nsID{}, true
		if path != hostLinks {
			id, ok = boundNamespace(path)
		}
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
			if path == hostLinks {
				w.m.log.Warn("cannot watch interface state; checking it every second", "err", err)
			} else {
				w.m.log.Warn("cannot watch the links of a namespace; checking them every second", "namespace", filepath.Base(path), "err", err)
			}
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

// subscribe subscribes to the links of the namespace at path (hostLinks:
// the host's): an update of an interface this manager uses there (a VIP
// interface, a pool's) wakes the loop. w.mu is held.
func (w *nsLinks) subscribe(path string) error {
	m := w.m
	s := &nsSub{stop: make(chan struct{}), ended: make(chan struct{})}
	opts := netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case <-s.stop: // the socket was closed to end it
			default:
				m.log.Debug("link updates", "namespace", filepath.Base(path), "err", err)
			}
		},
	}
	uses := func(name string) bool { return m.pools.hasIn(name, path) }
	if path == hostLinks {
		names := map[string]bool{}
		for _, f := range m.ifaces() {
			names[f.name] = true
		}
		uses = func(name string) bool { return names[name] || m.pools.has(name) }
	} else {
		h, err := netns.GetFromPath(path)
		if err != nil {
			return err
		}
		defer h.Close() // the socket keeps the namespace
		var st unix.Stat_t
		if err := unix.Fstat(int(h), &st); err != nil {
			return err
		}
		s.id = nsID{dev: st.Dev, ino: st.Ino}
		opts.Namespace = &h
	}
	updates := make(chan netlink.LinkUpdate, 16)
	err := netlink.LinkSubscribeWithOptions(updates, s.stop, opts)
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
			if u.Link != nil && uses(u.Link.Attrs().Name) {
				m.mu.Lock()
				m.linkChanged = true
				m.mu.Unlock()
				m.pokeAll()
			}
		}
	}()
	return nil
}
