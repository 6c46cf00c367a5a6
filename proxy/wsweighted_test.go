package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
	"github.com/teapot-lb/teapot-lb/proxy/l7"
)

// TestWebSocketThroughWeightedBackends: a WebSocket upgrade on a route
// whose backends are weighted (what every Gateway API rule becomes) is
// relayed to the member picked by weight, and frames flow both ways; a
// backend of weight 0 gets none.
func TestWebSocketThroughWeightedBackends(t *testing.T) {
	echoWS := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
		srv := &http.Server{Handler: mux}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	srv := l7.New(l7.Config{})
	t.Cleanup(func() { srv.Close() })
	p, _ := newProxy(t, Config{HTTP: NewHTTP(srv, nil)})
	port := freePort(t)
	lb := &pb.LoadBalancer{Name: "ws", Tenant: "acme",
		Listeners: []*pb.Listener{{Port: uint32(port), Protocol: "http"}},
		Routes: []*pb.Route{{
			Matches:  []*pb.RouteMatch{{Path: "/", PathType: "prefix"}},
			Backends: []*pb.RouteBackend{{Pool: "ws", Weight: proto.Uint32(1)}, {Pool: "never", Weight: proto.Uint32(0)}},
		}},
		Pools: map[string]*pb.BackendPool{
			"ws":    {Members: []*pb.Member{{Address: echoWS()}}},
			"never": {Members: []*pb.Member{{Address: deadAddr(t)}}},
		},
		Status: &pb.LoadBalancerStatus{Address: "127.0.0.2"},
	}
	update(t, p, lb)
	for i := range 5 {
		ws, err := websocket.Dial("ws://"+vipAddr("127.0.0.2", port)+"/ws", "", "ws://gateway/test")
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		ws.SetDeadline(time.Now().Add(10 * time.Second))
		for _, msg := range []string{"text frame", "another"} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("echo %q: got %q, %v", msg, got, err)
			}
		}
		ws.Close()
	}
}
