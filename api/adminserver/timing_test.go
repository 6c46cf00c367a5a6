package adminserver_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/teapot-lb/teapot-lb/api/adminserver"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// slowAdmin answers List after a pause and nothing else.
type slowAdmin struct {
	pb.UnimplementedAdminServer
	pause time.Duration
}

func (s slowAdmin) List(context.Context, *pb.ListRequest) (*pb.ListResponse, error) {
	time.Sleep(s.pause)
	return &pb.ListResponse{}, nil
}

// TestTimingMeasuresAdminCalls: an admin call through a real gRPC server
// is observed under its method, for at least as long as it took to
// answer; a method name the caller made up and another service's call
// add no series.
func TestTimingMeasuresAdminCalls(t *testing.T) {
	t.Parallel()
	timing := adminserver.NewTiming()
	srv := grpc.NewServer(grpc.StatsHandler(timing))
	pb.RegisterAdminServer(srv, slowAdmin{pause: 20 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pb.NewAdminClient(cc).List(ctx, &pb.ListRequest{Kind: "lb"}); err != nil {
		t.Fatal(err)
	}
	_ = cc.Invoke(ctx, "/teapot.v1.Admin/MadeUp", &pb.ListRequest{}, &pb.ListResponse{})
	_, _ = pb.NewClusterClient(cc).Health(ctx, &pb.HealthRequest{})

	// The server observes a call at its end, which may come just after
	// the client has its answer.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(timing.Collector())
	deadline := time.Now().Add(10 * time.Second)
	for testutil.CollectAndCount(timing.Collector()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				series = append(series, l.GetValue())
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() < 0.02 {
				t.Errorf("%s: %d calls in %.3f s, want 1 of at least 0.020 s", mf.GetName(), h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	if len(series) != 1 || series[0] != "List" {
		t.Fatalf("admin call times by method %v, want [List]", series)
	}
}
