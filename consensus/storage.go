package consensus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// The certificate store: keys and values (certmagic's storage) and locks,
// kept in the replicated state so that every LB host sees what any host
// obtained and any host can answer a challenge another host started.
// Writes return once committed; reads first catch up with the leader.

func (n *Node) txn(ctx context.Context, ops ...*pb.Op) error {
	_, err := n.write(ctx, &pb.ForwardRequest{Write: &pb.ForwardRequest_Txn{Txn: &pb.Txn{Ops: ops}}, Internal: true})
	return err
}

// StoragePut stores value under key.
func (n *Node) StoragePut(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("storage key must not be empty: %w", api.ErrInvalid)
	}
	item := &pb.StorageItem{Key: key, Value: value}
	return n.txn(ctx, &pb.Op{Op: &pb.Op_Put{Put: api.Wrap(item)}})
}

// StorageGet returns the item stored under key (api.ErrNotFound if none).
// The item is shared and must not be modified.
func (n *Node) StorageGet(ctx context.Context, key string) (*pb.StorageItem, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	item := n.fsm.st.get(api.KindStorageItem, key).GetStorageItem()
	if item == nil {
		return nil, fmt.Errorf("storage key %q %w", key, api.ErrNotFound)
	}
	return item, nil
}

// StorageDelete deletes key and every key under "key/"; deleting nothing
// is api.ErrNotFound.
func (n *Node) StorageDelete(ctx context.Context, key string) error {
	if err := n.ReadBarrier(ctx); err != nil {
		return err
	}
	if keys, _ := n.storageKeys(key, true); len(keys) == 0 {
		return fmt.Errorf("storage key %q %w", key, api.ErrNotFound)
	}
	ref := &pb.ObjectRef{Kind: api.KindStorageItem, Name: key}
	return n.txn(ctx, &pb.Op{Op: &pb.Op_Delete{Delete: ref}, Prefix: true})
}

// StorageList returns the keys under prefix: all of them when recursive,
// else the immediate children ("prefix/a", "prefix/dir").
func (n *Node) StorageList(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	if err := n.ReadBarrier(ctx); err != nil {
		return nil, err
	}
	keys, self := n.storageKeys(prefix, false)
	if !recursive {
		base := strings.TrimSuffix(prefix, "/")
		seen := map[string]bool{}
		var out []string
		for _, k := range keys {
			rest := strings.TrimPrefix(k, base+"/")
			if base == "" {
				rest = k
			}
			first, _, _ := strings.Cut(rest, "/")
			child := first
			if base != "" {
				child = base + "/" + first
			}
			if !seen[child] {
				seen[child] = true
				out = append(out, child)
			}
		}
		keys = out
	}
	if len(keys) == 0 && !self {
		return nil, fmt.Errorf("storage path %q %w", prefix, api.ErrNotFound)
	}
	return keys, nil
}

// storageKeys returns the keys under "prefix/" (all keys for ""), sorted,
// and whether prefix itself is a key. With withSelf, prefix is included.
func (n *Node) storageKeys(prefix string, withSelf bool) ([]string, bool) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	all := n.fsm.st.list(api.KindStorageItem, "")
	base := strings.TrimSuffix(prefix, "/")
	lo := 0
	if base != "" {
		lo, _ = slices.BinarySearchFunc(all, base+"/", func(o *pb.Object, k string) int {
			return strings.Compare(o.GetStorageItem().GetKey(), k)
		})
	}
	var out []string
	for _, o := range all[lo:] {
		k := o.GetStorageItem().GetKey()
		if base != "" && !strings.HasPrefix(k, base+"/") {
			break
		}
		out = append(out, k)
	}
	self := base != "" && n.fsm.st.get(api.KindStorageItem, base) != nil
	if self && withSelf {
		out = append([]string{base}, out...)
	}
	return out, self
}

// StorageLock takes (or refreshes) the lock name for owner for ttl, as
// measured by the leader's clock. It tries once: ErrLocked means another
// owner holds it and it has not expired.
func (n *Node) StorageLock(ctx context.Context, name, owner string, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("lock ttl must be positive: %w", api.ErrInvalid)
	}
	lock := &pb.StorageLock{Name: name, Owner: owner, Ttl: durationpb.New(ttl)}
	return n.txn(ctx, &pb.Op{Op: &pb.Op_Put{Put: api.Wrap(lock)}})
}

// StorageUnlock releases the lock name; only its owner may.
func (n *Node) StorageUnlock(ctx context.Context, name, owner string) error {
	ref := &pb.ObjectRef{Kind: api.KindStorageLock, Name: name}
	return n.txn(ctx, &pb.Op{Op: &pb.Op_Delete{Delete: ref}, LockOwner: owner})
}
