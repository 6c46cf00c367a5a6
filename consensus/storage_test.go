package consensus

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api"
)

func TestStorageKeysAndLocks(t *testing.T) {
	t.Parallel() // hosts of its own, in temporary directories on free ports
	hosts := threeHosts(t)
	a, b := hosts[1].node, hosts[2].node
	ctx := ctxT(t)

	for _, k := range []string{"certs/x/x.crt", "certs/x/x.key", "certs/y/y.crt", "acme/account.json", "certsz"} {
		if err := a.StoragePut(ctx, k, []byte("v:"+k)); err != nil {
			t.Fatal(err)
		}
	}
	// A write through one host is read through another.
	item, err := b.StorageGet(ctx, "certs/x/x.key")
	if err != nil || string(item.GetValue()) != "v:certs/x/x.key" || item.GetModified() == nil {
		t.Fatalf("get: %v %v", item, err)
	}
	if _, err := b.StorageGet(ctx, "certs/none"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	lists := []struct {
		prefix    string
		recursive bool
		want      string
	}{
		{"certs", false, "[certs/x certs/y]"},
		{"certs", true, "[certs/x/x.crt certs/x/x.key certs/y/y.crt]"},
		{"certs/x/", true, "[certs/x/x.crt certs/x/x.key]"},
		{"", false, "[acme certs certsz]"},
	}
	for _, l := range lists {
		got, err := b.StorageList(ctx, l.prefix, l.recursive)
		if err != nil || fmt.Sprint(got) != l.want {
			t.Errorf("list %q %v: %v %v, want %s", l.prefix, l.recursive, got, err, l.want)
		}
	}
	// Deleting a "directory" deletes what is under it, not its neighbours.
	if err := b.StorageDelete(ctx, "certs/x"); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.StorageList(ctx, "", true); fmt.Sprint(got) != "[acme/account.json certs/y/y.crt certsz]" {
		t.Fatalf("after delete: %v", got)
	}
	if err := a.StorageDelete(ctx, "certs/x"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}

	// Locks: one owner at a time, refresh by the owner, release only by it,
	// taken over after expiry.
	if err := a.StorageLock(ctx, "issue-shop", "host-a", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := b.StorageLock(ctx, "issue-shop", "host-b", time.Minute); !errors.Is(err, ErrLocked) {
		t.Fatalf("second owner: %v", err)
	}
	if err := a.StorageLock(ctx, "issue-shop", "host-a", 300*time.Millisecond); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if err := b.StorageUnlock(ctx, "issue-shop", "host-b"); !errors.Is(err, ErrLocked) {
		t.Fatalf("release by another owner: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := b.StorageLock(ctx, "issue-shop", "host-b", time.Minute); err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	if err := a.StorageLock(ctx, "issue-shop", "host-a", time.Minute); !errors.Is(err, ErrLocked) {
		t.Fatalf("old owner after takeover: %v", err)
	}
	if err := b.StorageUnlock(ctx, "issue-shop", "host-b"); err != nil {
		t.Fatal(err)
	}
	if err := a.StorageLock(ctx, "issue-shop", "host-a", time.Minute); err != nil {
		t.Fatalf("after release: %v", err)
	}
}
