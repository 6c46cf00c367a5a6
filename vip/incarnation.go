package vip

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// incarnationFile, in Config.StateDir, holds the incarnation of this
// host's latest process, in decimal.
const incarnationFile = "vip-incarnation"

// nextIncarnation returns the incarnation of a process of this host
// started at now: the clock in nanoseconds since 1970, or one more than
// the incarnation kept in dir when that is not less (the clock was set
// back). It keeps the result in dir before returning it, so that every
// later process of the host has a greater one: a receiver then refuses a
// recorded heartbeat of an earlier process for good (receive), not only
// while the process it hears still sends. With dir "" the clock alone
// orders the processes, as long as it is not set back by more than the
// time between two starts; so with a dir that does not exist yet (a
// host's first start), which it does not make.
func nextIncarnation(dir string, now time.Time) (uint64, error) {
	inc := uint64(max(now.UnixNano(), 1))
	if dir == "" {
		return inc, nil
	}
	path := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		last, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil || last == math.MaxUint64 {
			return 0, fmt.Errorf("%w: %s holds %q, not the incarnation of this host's latest process: remove the file and start again (the incarnation then comes from the clock)",
				ErrConfig, path, truncate(string(b), 40))
		}
		inc = max(inc, last+1)
	case errors.Is(err, os.ErrNotExist):
	default:
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// A host's first start: no earlier process of it to order
		// against but by the clock. The data dir is made, and checked
		// with what to do when it fails, by the state's own store.
		return inc, nil
	}
	if err := writeSynced(path, []byte(strconv.FormatUint(inc, 10)+"\n")); err != nil {
		return 0, fmt.Errorf("keep this process's incarnation: %w", err)
	}
	return inc, nil
}

// writeSynced replaces path with b: written to a file beside it, synced,
// renamed over it, and the directory synced, so that a crash leaves the
// old content or the new one.
func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// truncate returns s cut to n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
