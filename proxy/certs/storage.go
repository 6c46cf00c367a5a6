package certs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// KV is the replicated certificate store: keys with values, and locks with
// an owner and an expiry stamped by the proposer. Writes return once
// committed; reads see every write acknowledged before them. Missing keys
// and locks are api.ErrNotFound; a lock held by another owner that has not
// expired is api.ErrLocked. *consensus.Node satisfies it.
type KV interface {
	StoragePut(ctx context.Context, key string, value []byte) error
	StorageGet(ctx context.Context, key string) (*pb.StorageItem, error)
	// StorageDelete deletes key and every key under "key/".
	StorageDelete(ctx context.Context, key string) error
	// StorageList returns the keys under prefix: all of them when
	// recursive, else the immediate children.
	StorageList(ctx context.Context, prefix string, recursive bool) ([]string, error)
	// StorageLock takes or refreshes the lock name for owner for ttl.
	StorageLock(ctx context.Context, name, owner string, ttl time.Duration) error
	// StorageUnlock releases the lock; only its owner may.
	StorageUnlock(ctx context.Context, name, owner string) error
}

// Lock timing defaults.
const (
	// DefaultLockTTL is how long a lock lives without a refresh: the time
	// other hosts wait for a holder that died.
	DefaultLockTTL = 20 * time.Second
	// lockPoll is the wait between attempts of a blocking Lock.
	lockPoll = 250 * time.Millisecond
)

// ErrLockLost is returned by Unlock when the lock expired while held and
// another owner took it over.
var ErrLockLost = errors.New("certs: lock was taken over by another owner after it expired")

// Storage is a certmagic.Storage and TryLocker over a KV. Every lock taken
// is refreshed every TTL/3 while held, so a holder that stays alive keeps
// it however long its work takes, and a holder that dies loses it after
// TTL. Each acquisition has its own owner id, so two goroutines of one
// process exclude each other too.
type Storage struct {
	kv     KV
	ttl    time.Duration
	prefix string // owner id prefix: host id and process nonce
	log    *slog.Logger

	seq  atomic.Uint64
	mu   sync.Mutex
	held map[string]*heldLock
}

type heldLock struct {
	owner string
	stop  chan struct{}
	done  chan struct{}
	lost  atomic.Bool
}

var (
	_ certmagic.Storage          = (*Storage)(nil)
	_ certmagic.TryLocker        = (*Storage)(nil)
	_ certmagic.LockLeaseRenewer = (*Storage)(nil)
)

// NewStorage returns a Storage over kv. host names this LB host in lock
// owners; ttl 0 takes DefaultLockTTL.
func NewStorage(kv KV, host string, ttl time.Duration, log *slog.Logger) *Storage {
	if ttl <= 0 {
		ttl = DefaultLockTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	return &Storage{
		kv:     kv,
		ttl:    ttl,
		prefix: host + "/" + hex.EncodeToString(nonce[:]),
		log:    log,
		held:   map[string]*heldLock{},
	}
}

// Store puts value at key.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	if err := s.kv.StoragePut(ctx, key, value); err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	item, err := s.kv.StorageGet(ctx, key)
	if err != nil {
		return nil, notExist(key, err)
	}
	return item.GetValue(), nil
}

// Delete deletes key and everything under it; a missing key is no error.
func (s *Storage) Delete(ctx context.Context, key string) error {
	err := s.kv.StorageDelete(ctx, key)
	if err != nil && !errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a value or a prefix of values.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	if _, err := s.kv.StorageGet(ctx, key); err == nil {
		return true
	}
	keys, err := s.kv.StorageList(ctx, key, false)
	return err == nil && len(keys) > 0
}

// List returns the keys under prefix, or fs.ErrNotExist.
func (s *Storage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	keys, err := s.kv.StorageList(ctx, prefix, recursive)
	if err != nil {
		return nil, notExist(prefix, err)
	}
	return keys, nil
}

// Stat describes key: a value (terminal) or a prefix of values.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	item, err := s.kv.StorageGet(ctx, key)
	if err == nil {
		return certmagic.KeyInfo{
			Key:        key,
			Modified:   item.GetModified().AsTime(),
			Size:       int64(len(item.GetValue())),
			IsTerminal: true,
		}, nil
	}
	if !errors.Is(err, api.ErrNotFound) {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s: %w", key, err)
	}
	if keys, lerr := s.kv.StorageList(ctx, key, false); lerr == nil && len(keys) > 0 {
		return certmagic.KeyInfo{Key: key}, nil
	}
	return certmagic.KeyInfo{}, notExist(key, err)
}

func notExist(key string, err error) error {
	if errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("%s: %w", key, fs.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", key, err)
}

// Lock takes the lock name, waiting while another owner holds it (until
// it is released or expires) or until ctx ends.
func (s *Storage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for lock %s: %w", name, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// TryLock takes the lock name if no other owner holds it; it reports
// whether it did.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	s.mu.Lock()
	_, mine := s.held[name]
	s.mu.Unlock()
	if mine {
		return false, nil // another goroutine of this process holds it
	}
	owner := fmt.Sprintf("%s/%d", s.prefix, s.seq.Add(1))
	err := s.kv.StorageLock(ctx, name, owner, s.ttl)
	switch {
	case errors.Is(err, api.ErrLocked):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("lock %s: %w", name, err)
	}
	h := &heldLock{owner: owner, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if _, raced := s.held[name]; raced {
		s.mu.Unlock()
		_ = s.kv.StorageUnlock(context.WithoutCancel(ctx), name, owner)
		return false, nil
	}
	s.held[name] = h
	s.mu.Unlock()
	go s.refresh(name, h)
	return true, nil
}

// refresh extends a held lock every TTL/3 until it is released. When
// another owner took it over (this host was cut off for longer than the
// TTL), it stops and Unlock reports ErrLockLost.
func (s *Storage) refresh(name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.ttl/3)
		err := s.kv.StorageLock(ctx, name, h.owner, s.ttl)
		cancel()
		switch {
		case errors.Is(err, api.ErrLocked):
			h.lost.Store(true)
			s.log.Warn("certificate store lock taken over after it expired", "lock", name)
			return
		case err != nil:
			s.log.Debug("refresh certificate store lock", "lock", name, "err", err)
		}
	}
}

// RenewLockLease refreshes a lock this process holds.
func (s *Storage) RenewLockLease(ctx context.Context, name string, _ time.Duration) error {
	s.mu.Lock()
	h := s.held[name]
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("lock %s is not held here: %w", name, api.ErrNotFound)
	}
	return s.kv.StorageLock(ctx, name, h.owner, s.ttl)
}

// Unlock releases a lock this process holds.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("unlock %s: not held here: %w", name, api.ErrNotFound)
	}
	close(h.stop)
	<-h.done
	err := s.kv.StorageUnlock(ctx, name, h.owner)
	switch {
	case h.lost.Load() || errors.Is(err, api.ErrLocked):
		return fmt.Errorf("unlock %s: %w", name, ErrLockLost)
	case errors.Is(err, api.ErrNotFound):
		return nil // expired and cleaned up: nobody holds it
	case err != nil:
		return fmt.Errorf("unlock %s: %w", name, err)
	}
	return nil
}

// Close releases every lock this process holds, so that other hosts need
// not wait for them to expire.
func (s *Storage) Close() {
	s.mu.Lock()
	names := make([]string, 0, len(s.held))
	for n := range s.held {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Unlock(ctx, n)
		cancel()
	}
}

// String names the storage in certmagic's logs.
func (s *Storage) String() string { return "teapot-lb replicated certificate store" }
