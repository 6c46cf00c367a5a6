package consensus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The data directory's checks before anything is read or written: a host
// whose disk is full, read-only, owned by someone else or damaged stops
// with what to do, and never starts with an empty state.

// minFreeBytes is the free space a host needs to start: room for the Raft
// log to grow and for a snapshot.
const minFreeBytes = 16 << 20

// probeBytes is written and synced to prove the disk takes writes.
const probeBytes = 1 << 20

// checkDataDir checks that dir can hold this host's state.
func checkDataDir(dir string) error {
	if err := checkOwner(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data dir %s: %w (check that the directory above it exists and this user may write there)", dir, err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil {
		if free := uint64(fs.Bavail) * uint64(fs.Bsize); free < minFreeBytes {
			return fmt.Errorf("data dir %s has %d KiB free, and a host needs at least %d MiB: free space on that file system (or move --data-dir), then start again",
				dir, free>>10, minFreeBytes>>20)
		}
	}
	probe := filepath.Join(dir, ".write-probe")
	defer os.Remove(probe)
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.Write(make([]byte, probeBytes))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("data dir %s does not take writes: %w; %s", dir, err, remedy(err))
	}
	return nil
}

// remedy says what to do about a failed write.
func remedy(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "free space on that file system (or move --data-dir), then start again"
	case errors.Is(err, syscall.EROFS):
		return "the file system is read-only: remount it read-write (check the kernel log for disk errors first)"
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("this process (uid %d) may not write there: chown -R the data dir to the user teapot-lb runs as", os.Geteuid())
	case errors.Is(err, syscall.EIO):
		return "the disk reports I/O errors: replace it, then rebuild this host (README, \"A damaged data dir\")"
	}
	return "fix the file system, then start again"
}

// checkOwner refuses a data dir that belongs to another user than the one
// this process runs as: files it wrote would be unreadable to the other,
// or the other's to it. Root is refused too on a dir of another user: what
// root wrote there would stop the owner's unit.
func checkOwner(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w; %s", dir, err, remedy(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("data dir %s is not a directory: give --data-dir a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); uid == 0 && st.Uid != 0 {
		return fmt.Errorf("data dir %s belongs to uid %d, and teapot-lb runs as root: files root writes there would be unreadable to its owner (the unit's user); "+
			"run as the owner (for example sudo -u teapot-lb teapot-lb serve ...)", dir, st.Uid)
	} else if uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("data dir %s belongs to uid %d, but teapot-lb runs as uid %d: chown -R %d %s (or run as its owner)",
			dir, st.Uid, uid, uid, dir)
	}
	return nil
}

// storeError explains a Raft store that could not be opened: the file
// system's remedy when the cause is permissions, space or a read-only
// mount, and damaged() for what cannot be read or decoded.
func storeError(what, path string, err error) error {
	switch {
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%s %s: %w; %s", what, path, err, remedy(err))
	}
	return damaged(what, path, err)
}

// damaged explains a Raft log or snapshot that cannot be read.
func damaged(what, path string, err error) error {
	return fmt.Errorf("%s %s cannot be read: %w. This host's state is damaged; it will not start empty. "+
		"If the cluster has other hosts: run \"teapot-lb cluster remove ID\" on one of them, move this data dir away, and join this host again. "+
		"If it was the only host: move the data dir away and start with --restore from a backup", what, path, err)
}
