package certs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStorageKeys(t *testing.T) {
	ctx := ctxT(t)
	s := NewStorage(newMemStore(), "h1", 0, nil)
	for _, k := range []string{"certificates/ca/a/a.crt", "certificates/ca/a/a.key", "certificates/ca/b/b.crt", "acme/x"} {
		if err := s.Store(ctx, k, []byte("v:"+k)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		run  func() (string, error)
		want string
	}{
		{"load", func() (string, error) { v, err := s.Load(ctx, "certificates/ca/a/a.key"); return string(v), err }, "v:certificates/ca/a/a.key"},
		{"list children", func() (string, error) { v, err := s.List(ctx, "certificates/ca", false); return fmt.Sprint(v), err }, "[certificates/ca/a certificates/ca/b]"},
		{"list recursive", func() (string, error) { v, err := s.List(ctx, "certificates", true); return fmt.Sprint(len(v)), err }, "3"},
		{"exists file", func() (string, error) { return fmt.Sprint(s.Exists(ctx, "acme/x")), nil }, "true"},
		{"exists dir", func() (string, error) { return fmt.Sprint(s.Exists(ctx, "certificates/ca")), nil }, "true"},
		{"exists none", func() (string, error) { return fmt.Sprint(s.Exists(ctx, "certificates/cb")), nil }, "false"},
		{"stat file", func() (string, error) {
			ki, err := s.Stat(ctx, "acme/x")
			return fmt.Sprint(ki.IsTerminal, ki.Size, !ki.Modified.IsZero()), err
		}, "true 8 true"},
		{"stat dir", func() (string, error) {
			ki, err := s.Stat(ctx, "certificates/ca/a")
			return fmt.Sprint(ki.IsTerminal), err
		}, "false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.run()
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("missing is fs.ErrNotExist", func(t *testing.T) {
		if _, err := s.Load(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("load: %v", err)
		}
		if _, err := s.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat: %v", err)
		}
		if _, err := s.List(ctx, "nope", true); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("list: %v", err)
		}
	})
	t.Run("delete a directory, then again", func(t *testing.T) {
		if err := s.Delete(ctx, "certificates/ca/a"); err != nil {
			t.Fatal(err)
		}
		if s.Exists(ctx, "certificates/ca/a/a.crt") || !s.Exists(ctx, "certificates/ca/b/b.crt") {
			t.Fatal("delete removed the wrong keys")
		}
		if err := s.Delete(ctx, "certificates/ca/a"); err != nil {
			t.Fatalf("deleting a missing key: %v, want nil", err)
		}
	})
}

func TestStorageLocks(t *testing.T) {
	kv := newMemStore()
	const ttl = 300 * time.Millisecond
	a := NewStorage(kv, "a", ttl, nil)
	b := NewStorage(kv, "b", ttl, nil)

	t.Run("one holder at a time, kept alive while held", func(t *testing.T) {
		ctx := ctxT(t)
		if ok, err := a.TryLock(ctx, "issue"); !ok || err != nil {
			t.Fatalf("a: %v %v", ok, err)
		}
		// Three TTLs later a still holds it: the refresh keeps it alive.
		time.Sleep(3 * ttl)
		if ok, err := b.TryLock(ctx, "issue"); ok || err != nil {
			t.Fatalf("b took a lock a holds and refreshes: %v %v", ok, err)
		}
		// The same process is excluded too.
		if ok, _ := a.TryLock(ctx, "issue"); ok {
			t.Fatal("a second holder inside the same process")
		}
		if err := a.Unlock(ctx, "issue"); err != nil {
			t.Fatal(err)
		}
		if ok, err := b.TryLock(ctx, "issue"); !ok || err != nil {
			t.Fatalf("b after release: %v %v", ok, err)
		}
		if err := b.Unlock(ctx, "issue"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("only the owner releases", func(t *testing.T) {
		ctx := ctxT(t)
		if ok, _ := a.TryLock(ctx, "mine"); !ok {
			t.Fatal("a could not lock")
		}
		defer a.Unlock(ctx, "mine")
		if err := b.Unlock(ctx, "mine"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("b unlocked a lock it does not hold: %v", err)
		}
		if err := kv.StorageUnlock(ctx, "mine", "intruder"); !errors.Is(err, api.ErrLocked) {
			t.Fatalf("a stranger released the lock: %v", err)
		}
	})

	t.Run("taken over after its holder died", func(t *testing.T) {
		ctx := ctxT(t)
		// A holder that died: a lock record nobody refreshes.
		if err := kv.StorageLock(ctx, "orphan", "dead-host/1", ttl); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := b.Lock(ctx, "orphan"); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < ttl/2 {
			t.Fatalf("took the lock after %s, before it expired", waited)
		}
		if err := b.Unlock(ctx, "orphan"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a holder cut off past the TTL learns it lost the lock", func(t *testing.T) {
		ctx := ctxT(t)
		cut := &cutKV{memStore: kv}
		c := NewStorage(cut, "c", ttl, nil)
		if ok, _ := c.TryLock(ctx, "fragile"); !ok {
			t.Fatal("c could not lock")
		}
		cut.cut.Store(true) // c's refreshes fail
		time.Sleep(ttl + ttl/2)
		if err := b.Lock(ctx, "fragile"); err != nil {
			t.Fatal(err)
		}
		cut.cut.Store(false)
		time.Sleep(ttl / 2)
		if err := c.Unlock(ctx, "fragile"); !errors.Is(err, ErrLockLost) {
			t.Fatalf("c unlock: %v, want ErrLockLost", err)
		}
		if err := b.Unlock(ctx, "fragile"); err != nil {
			t.Fatalf("the new owner's release: %v", err)
		}
	})

	t.Run("many contenders, one at a time", func(t *testing.T) {
		ctx := ctxT(t)
		var inside, maxInside atomic.Int32
		var wg sync.WaitGroup
		for i := range 6 {
			s := NewStorage(kv, fmt.Sprint("h", i), ttl, nil)
			wg.Go(func() {
				for range 3 {
					if err := s.Lock(ctx, "busy"); err != nil {
						t.Error(err)
						return
					}
					n := inside.Add(1)
					if n > maxInside.Load() {
						maxInside.Store(n)
					}
					time.Sleep(5 * time.Millisecond)
					inside.Add(-1)
					if err := s.Unlock(ctx, "busy"); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if maxInside.Load() != 1 {
			t.Fatalf("%d holders at once", maxInside.Load())
		}
	})
}

// cutKV fails every lock call while cut is set.
type cutKV struct {
	*memStore
	cut atomic.Bool
}

func (c *cutKV) StorageLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	if c.cut.Load() {
		return errors.New("no leader reachable")
	}
	return c.memStore.StorageLock(ctx, name, owner, ttl)
}
