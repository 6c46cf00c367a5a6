package attach

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The main goroutine keeps the process's main thread (see init).
func init() { runtime.LockOSThread() }

// mainThreadAway reports whether TestMain moved the main thread into a
// namespace of its own.
var mainThreadAway bool

// TestMain moves the main thread into a network namespace of its own for
// the whole run (as root): /proc/self/ns/net then names that namespace,
// not the host's, as it does in serve while a goroutine that happens to
// hold the main thread works inside a tenant's namespace. A Manager that
// took the host's namespace from there would bring its threads "home"
// into the wrong one, and every test here would fail.
func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			fmt.Fprintln(os.Stderr, "attach: move the main thread into a namespace of its own:", err)
			os.Exit(1)
		}
		mainThreadAway = true
	}
	os.Exit(m.Run())
}

// A Manager takes the host's namespace, the one of threads no goroutine
// holds, whatever namespace the main thread is in.
func TestManagerTakesTheHostNamespace(t *testing.T) {
	m, _ := newManager(t, "lb1") // as root only, as TestMain's move
	if !mainThreadAway {
		t.Fatal("TestMain did not move the main thread")
	}
	var host, self, taken unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &host); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(int(m.host.Fd()), &taken); err != nil {
		t.Fatal(err)
	}
	if self.Ino == host.Ino {
		t.Fatal("the main thread is in the host's namespace: the test shows nothing")
	}
	if taken.Ino != host.Ino {
		t.Errorf("the manager took namespace %d as the host's, the host's is %d (the main thread's %d)", taken.Ino, host.Ino, self.Ino)
	}
}
