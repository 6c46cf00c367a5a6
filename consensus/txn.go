package consensus

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// checkTxn is the proposer's check: txn's operations in order against ov,
// with every rule of the model (api.Validate*, api.ValidateDelete, quotas,
// addresses), recorded in ov. The leader runs it before it proposes; Apply
// never does (see applyTxn and DESIGN.md, "A state machine that stays the
// same across versions").
//
// now is the proposer's stamped time, the only clock either may use (lock
// expiry).
func checkTxn(ov *overlay, txn *pb.Txn, now time.Time) error {
	return runTxn(ov, txn, now, true)
}

// applyTxn is Apply's check: only what a log entry must find at apply time
// to mean what its proposer meant — objects that must or must not exist,
// deletions of objects that exist, and storage locks held by their owner
// until the stamped time. It reads no rule that a release may change, so
// every host of every version gives the same result for the same entry.
func applyTxn(ov *overlay, txn *pb.Txn, now time.Time) error {
	return runTxn(ov, txn, now, false)
}

func runTxn(ov *overlay, txn *pb.Txn, now time.Time, rules bool) error {
	ops := txn.GetOps()
	if len(ops) == 0 {
		return errors.New("empty transaction")
	}
	// Objects written together are validated against a view that holds
	// them all, so that a pool naming a tenant and the tenant naming the
	// pool can arrive in one write.
	var puts []*pb.Object
	for _, op := range ops {
		switch x := op.GetOp().(type) {
		case *pb.Op_Put:
			ref := api.RefOf(x.Put)
			if ref.Kind == "" {
				return fmt.Errorf("object has no kind: %w", api.ErrInvalid)
			}
			existing := ov.get(ref.Kind, keyOf(ref))
			if op.GetMustNotExist() && existing != nil {
				return fmt.Errorf("%s %w", api.RefString(ref), api.ErrExists)
			}
			if op.GetMustExist() && existing == nil {
				return fmt.Errorf("%s %w", api.RefString(ref), api.ErrNotFound)
			}
			if l := existing.GetStorageLock(); l != nil && l.GetOwner() != x.Put.GetStorageLock().GetOwner() && l.GetExpires().AsTime().After(now) {
				return fmt.Errorf("lock %s is held by %s until %s: %w", l.GetName(), l.GetOwner(), l.GetExpires().AsTime().Format(time.RFC3339Nano), ErrLocked)
			}
			ov.set(ref, x.Put)
			puts = append(puts, x.Put)
		case *pb.Op_Delete:
			ref := x.Delete
			if op.GetPrefix() && ref.GetKind() == api.KindStorageItem {
				under := ov.list(api.KindStorageItem, "")
				lo, _ := slices.BinarySearchFunc(under, ref.GetName()+"/", func(o *pb.Object, k string) int {
					return strings.Compare(o.GetStorageItem().GetKey(), k)
				})
				for _, o := range under[lo:] {
					k := o.GetStorageItem().GetKey()
					if !strings.HasPrefix(k, ref.GetName()+"/") {
						break
					}
					ov.set(&pb.ObjectRef{Kind: api.KindStorageItem, Name: k}, nil)
				}
				if ov.get(api.KindStorageItem, ref.GetName()) != nil {
					ov.set(ref, nil)
				}
				continue
			}
			existing := ov.get(ref.GetKind(), keyOf(ref))
			if existing == nil {
				return fmt.Errorf("%s %w", api.RefString(ref), api.ErrNotFound)
			}
			if l := existing.GetStorageLock(); l != nil && l.GetOwner() != op.GetLockOwner() {
				return fmt.Errorf("lock %s is held by %s, not %s: %w", l.GetName(), l.GetOwner(), op.GetLockOwner(), ErrLocked)
			}
			if rules && !storageKind(ref.GetKind()) {
				if err := api.ValidateDelete(ref, catalog{r: ov}); err != nil {
					return err
				}
			}
			ov.set(ref, nil)
		default:
			return fmt.Errorf("unknown operation %T: %w", x, api.ErrInvalid)
		}
	}
	if !rules {
		return nil
	}
	// Quotas count what the write adds against the state before it: ov's
	// parent (the caller hands checkTxn a fresh overlay).
	view := catalog{r: ov, prior: ov.parent}
	for _, o := range puts {
		if err := validate(o, view); err != nil {
			return err
		}
	}
	return nil
}

func validate(o *pb.Object, c api.Catalog) error {
	switch v := o.GetKind().(type) {
	case *pb.Object_Tenant:
		return api.ValidateTenant(v.Tenant, c)
	case *pb.Object_VipPool:
		return api.ValidatePool(v.VipPool, c)
	case *pb.Object_LoadBalancer:
		return api.ValidateLoadBalancer(v.LoadBalancer, c)
	case *pb.Object_Node:
		n := v.Node
		var errs []api.FieldError
		if n.GetId() == "" {
			errs = append(errs, api.FieldError{Field: "id", Reason: "must not be empty"})
		}
		if _, err := netip.ParseAddrPort(n.GetRaftAddr()); err != nil {
			errs = append(errs, api.FieldError{Field: "raftAddr", Reason: "must be IP:port"})
		}
		if _, err := netip.ParseAddrPort(n.GetApiAddr()); err != nil {
			errs = append(errs, api.FieldError{Field: "apiAddr", Reason: "must be IP:port"})
		}
		if a := n.GetHeartbeatAddr(); a != "" {
			if _, err := netip.ParseAddrPort(a); err != nil {
				errs = append(errs, api.FieldError{Field: "heartbeatAddr", Reason: "must be IP:port"})
			}
		}
		errs = append(errs, api.CheckNodeServices(n)...)
		if len(errs) > 0 {
			return &api.ValidationError{Ref: api.RefString(api.RefOf(o)), Errors: errs}
		}
	case *pb.Object_JoinToken:
		if v.JoinToken.GetId() == "" || len(v.JoinToken.GetSecretSha256()) == 0 {
			return &api.ValidationError{Ref: "JoinToken", Errors: []api.FieldError{{Field: "id", Reason: "token needs an id and a secret hash"}}}
		}
	case *pb.Object_StorageItem:
		if v.StorageItem.GetKey() == "" {
			return &api.ValidationError{Ref: "StorageItem", Errors: []api.FieldError{{Field: "key", Reason: "must not be empty"}}}
		}
	case *pb.Object_StorageLock:
		if v.StorageLock.GetName() == "" || v.StorageLock.GetOwner() == "" {
			return &api.ValidationError{Ref: "StorageLock", Errors: []api.FieldError{{Field: "owner", Reason: "a lock needs a name and an owner"}}}
		}
	case *pb.Object_Certificate:
		if v.Certificate.GetName() == "" || v.Certificate.GetTenant() == "" {
			return &api.ValidationError{Ref: "Certificate", Errors: []api.FieldError{{Field: "name", Reason: "certificate needs a name and a tenant"}}}
		}
		// A new certificate and its key (written with it) count towards
		// what the tenant stores; the cluster's own updates of one that
		// exists (its state, its renewals) are never refused for it.
		ref := api.RefOf(o)
		if cat, ok := c.(catalog); ok && cat.prior != nil && cat.prior.get(api.KindCertificate, keyOf(ref)) != nil {
			return nil
		}
		return api.CheckStoredBytes(api.RefString(ref), v.Certificate.GetTenant(), c)
	}
	return nil
}

// storageKind: the certificate store's records, which nothing refers to.
func storageKind(kind string) bool {
	return kind == api.KindStorageItem || kind == api.KindStorageLock
}
