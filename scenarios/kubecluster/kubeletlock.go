package kubecluster

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// devicePluginSocket is where every kubelet on a machine listens for
// device plugins, whatever its --root-dir: a path compiled into the
// kubelet. Each kubelet removes what the directory holds when it starts,
// then binds the socket; two that start at once can both remove it first,
// and the second to bind fails ("address already in use") and exits.
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// kubeletStartLock is a lock file every kubelet start of this machine
// takes (labs side by side in one test process or in several).
var kubeletStartLock = filepath.Join(os.TempDir(), "teapot-kubelet-start.lock")

// kubeletStartTimeout bounds the wait for a kubelet's device plugin
// socket before the next kubelet may start.
const kubeletStartTimeout = 90 * time.Second

// startKubeletAlone runs start (which starts a kubelet) while no other
// kubelet of this machine starts, and waits until the kubelet has bound
// its device plugin socket, has exited, or kubeletStartTimeout passed.
func startKubeletAlone(start func() (*Proc, error)) (*Proc, error) {
	f, err := os.OpenFile(kubeletStartLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubelet start lock: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("kubelet start lock %s: %w", kubeletStartLock, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	began := time.Now()
	p, err := start()
	if err != nil {
		return p, err
	}
	for time.Since(began) < kubeletStartTimeout && p.Running() {
		if fi, err := os.Stat(devicePluginSocket); err == nil && fi.Mode()&os.ModeSocket != 0 && !fi.ModTime().Before(began.Add(-time.Second)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p, nil
}
