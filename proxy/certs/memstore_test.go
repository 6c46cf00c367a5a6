package certs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// memStore is an in-memory Store and ServiceStore with the semantics of
// the replicated one: keys, prefix deletes, locks with owner and expiry,
// Certificate objects.
type memStore struct {
	mu      sync.Mutex
	items   map[string]*pb.StorageItem
	locks   map[string]*pb.StorageLock
	objects map[string]*pb.Object // "Kind/tenant/name"
	gen     map[string]uint64
	rev     uint64
	// failPut makes StoragePut fail while set.
	failPut error
}

func newMemStore() *memStore {
	return &memStore{items: map[string]*pb.StorageItem{}, locks: map[string]*pb.StorageLock{}, objects: map[string]*pb.Object{}, gen: map[string]uint64{}}
}

func (s *memStore) StoragePut(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut != nil {
		return s.failPut
	}
	s.items[key] = &pb.StorageItem{Key: key, Value: slices.Clone(value), Modified: timestamppb.Now()}
	return nil
}

func (s *memStore) StorageGet(_ context.Context, key string) (*pb.StorageItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[key]
	if it == nil {
		return nil, fmt.Errorf("storage key %q %w", key, api.ErrNotFound)
	}
	return it, nil
}

func (s *memStore) StorageDelete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.items {
		if k == key || strings.HasPrefix(k, strings.TrimSuffix(key, "/")+"/") {
			delete(s.items, k)
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("storage key %q %w", key, api.ErrNotFound)
	}
	return nil
}

func (s *memStore) StorageList(_ context.Context, prefix string, recursive bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := strings.TrimSuffix(prefix, "/")
	seen := map[string]bool{}
	var out []string
	for k := range s.items {
		rest, ok := strings.CutPrefix(k, base+"/")
		if base == "" {
			rest, ok = k, true
		}
		if !ok {
			continue
		}
		if !recursive {
			first, _, _ := strings.Cut(rest, "/")
			if base != "" {
				first = base + "/" + first
			}
			k = first
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	slices.Sort(out)
	if len(out) == 0 && s.items[base] == nil {
		return nil, fmt.Errorf("storage path %q %w", prefix, api.ErrNotFound)
	}
	return out, nil
}

func (s *memStore) StorageLock(_ context.Context, name, owner string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l := s.locks[name]; l != nil && l.GetOwner() != owner && l.GetExpires().AsTime().After(now) {
		return fmt.Errorf("lock %s is held by %s: %w", name, l.GetOwner(), api.ErrLocked)
	}
	s.locks[name] = &pb.StorageLock{Name: name, Owner: owner, Expires: timestamppb.New(now.Add(ttl))}
	return nil
}

func (s *memStore) StorageUnlock(_ context.Context, name, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[name]
	switch {
	case l == nil:
		return fmt.Errorf("lock %s %w", name, api.ErrNotFound)
	case l.GetOwner() != owner:
		return fmt.Errorf("lock %s is held by %s: %w", name, l.GetOwner(), api.ErrLocked)
	}
	delete(s.locks, name)
	return nil
}

func objKey(ref *pb.ObjectRef) string {
	return ref.GetKind() + "/" + ref.GetTenant() + "/" + ref.GetName()
}

func (s *memStore) put(o *pb.Object) {
	o = proto.Clone(o).(*pb.Object)
	k := objKey(api.RefOf(o))
	s.gen[k]++
	if c := o.GetCertificate(); c != nil {
		c.Meta = &pb.Meta{Generation: s.gen[k]}
	}
	s.objects[k] = o
	s.rev++
}

func (s *memStore) Apply(_ context.Context, req *pb.ApplyRequest, _ bool) (*pb.ApplyResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range req.GetObjects() {
		if req.GetMode() == pb.ApplyMode_APPLY_MODE_CREATE && s.objects[objKey(api.RefOf(o))] != nil {
			return nil, fmt.Errorf("%s %w", api.RefString(api.RefOf(o)), api.ErrExists)
		}
	}
	for _, o := range req.GetObjects() {
		s.put(o)
	}
	return &pb.ApplyResponse{Revision: s.rev}, nil
}

func (s *memStore) Delete(_ context.Context, req *pb.DeleteRequest, _ bool) (*pb.DeleteResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := objKey(req.GetRef())
	if s.objects[k] == nil {
		return nil, fmt.Errorf("%s %w", k, api.ErrNotFound)
	}
	delete(s.objects, k)
	s.rev++
	return &pb.DeleteResponse{Revision: s.rev}, nil
}

func (s *memStore) Get(_ context.Context, ref *pb.ObjectRef) (*pb.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[objKey(ref)]
	if o == nil {
		return nil, fmt.Errorf("%s %w", api.RefString(ref), api.ErrNotFound)
	}
	return o, nil
}

func (s *memStore) List(_ context.Context, kind, tenant string) ([]*pb.Object, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.Object
	for _, o := range s.objects {
		ref := api.RefOf(o)
		if ref.GetKind() == kind && (tenant == "" || ref.GetTenant() == tenant) {
			out = append(out, o)
		}
	}
	return out, s.rev, nil
}

func (s *memStore) PutCertificate(ctx context.Context, cert *pb.Certificate, key string, secret []byte) (*pb.Certificate, error) {
	if err := s.StoragePut(ctx, key, secret); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.put(api.Wrap(cert))
	s.mu.Unlock()
	o, err := s.Get(ctx, &pb.ObjectRef{Kind: api.KindCertificate, Tenant: cert.GetTenant(), Name: cert.GetName()})
	return o.GetCertificate(), err
}

func (s *memStore) DeleteCertificate(ctx context.Context, tenant, name, key string) error {
	if _, err := s.Delete(ctx, &pb.DeleteRequest{Ref: &pb.ObjectRef{Kind: api.KindCertificate, Tenant: tenant, Name: name}}, true); err != nil {
		return err
	}
	_ = s.StorageDelete(ctx, key)
	return nil
}

// objectsWith returns the stored objects plus extra, as the manager gets
// them from the replicated state.
func (s *memStore) objectsWith(extra ...*pb.Object) []*pb.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(extra)
	for _, o := range s.objects {
		out = append(out, o)
	}
	return out
}

// cert returns a Certificate object or nil.
func (s *memStore) cert(tenant, name string) *pb.Certificate {
	o, _ := s.Get(context.Background(), &pb.ObjectRef{Kind: api.KindCertificate, Tenant: tenant, Name: name})
	return o.GetCertificate()
}

var (
	_ Store        = (*memStore)(nil)
	_ ServiceStore = (*memStore)(nil)
)
