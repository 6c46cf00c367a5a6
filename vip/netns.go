package vip

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/teapot-lb/teapot-lb/api"
)

// DefaultNetnsDir is where the namespaces of tenants' attachments are
// bound (vip/attach), unless Config.NetnsDir says otherwise.
const DefaultNetnsDir = "/var/run/netns"

// AttachmentDevice is the VXLAN device in a tenant's attachment that the
// VIPs of pools in it live on (vip/attach.Device).
const AttachmentDevice = "tpx0"

// errNoReturn: a thread could not return to the host's namespace (it
// ends with its goroutine, never serving anything else).
var errNoReturn = errors.New("cannot return to the host's network namespace")

// attachmentNS is the path of tenant's attachment namespace.
func (m *Manager) attachmentNS(tenant string) string {
	dir := m.cfg.NetnsDir
	if dir == "" {
		dir = DefaultNetnsDir
	}
	return filepath.Join(dir, api.AttachmentNamespace(tenant))
}

// inNamespace runs fn on a thread that entered the namespace at path (the
// host's own for ""), and returns the thread to the host's namespace.
// Sockets fn makes stay in that namespace and work from any thread.
func inNamespace(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open the host's namespace: %w", err)
			return
		}
		defer host.Close()
		ns, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("namespace %s: %w", filepath.Base(path), err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter namespace %s: %w", filepath.Base(path), err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, errNoReturn) // the thread ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
