package agent

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/tenantsync/translate"
)

// A change the LB cluster says waits for the tenant's write budget
// becomes a Warning Event on each Service it names, saying why; names the
// agent does not know are passed over.
func TestThrottledChangesBecomeEvents(t *testing.T) {
	t.Parallel()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	if err := idx.Add(svc); err != nil {
		t.Fatal(err)
	}
	s := newDesiredSet()
	k := objKey{kind: translate.KindService, ns: "shop", name: "web"}
	s.update(k, &translate.Desired{LB: &pb.LoadBalancer{Name: "svc-shop-web"}, Version: "v1",
		Source: translate.Source{Kind: translate.KindService, Namespace: "shop", Name: "web"}})
	rec := record.NewFakeRecorder(10)
	a := &Agent{events: rec, book: newStatusBook(), set: s, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		src: translate.Sources{Services: corelisters.NewServiceLister(idx)}}
	reason := "change 7 writes 1.2 MiB (1233056 bytes); tenant acme may write 1.0 MiB (1048576 bytes) a second across the LB cluster (burst 8.0 MiB (8388608 bytes)), so it waits 338ms: raise quotas.writeBytesPerSecond to write faster"
	a.onThrottle(&pb.SyncThrottle{Seq: 7, Wait: durationpb.New(338 * time.Millisecond), Reason: reason, Names: []string{"svc-shop-web", "svc-gone"}})
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonThrottled) || !strings.Contains(got[0], "quotas.writeBytesPerSecond") {
		t.Fatalf("events %q, want one Warning %s naming the quota", got, ReasonThrottled)
	}
	if a.metrics.throttled.Load() != 1 {
		t.Errorf("throttled count %d, want 1", a.metrics.throttled.Load())
	}
}
