package l7

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/teapot-lb/teapot-lb/proxy/internal/splice"
)

// pipeFDs counts the pipes this process has open.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// TestIdleTunnelsHoldNoPipes: WebSocket tunnels splice through the host's
// pool (SetPipes) while bytes move and hold no pipe while they wait: 20
// idle tunnels leave at most the pool's idle pipes open. Through Go's own
// splice path each held a pipe per direction, 80 pipe descriptors.
func TestIdleTunnelsHoldNoPipes(t *testing.T) {
	wsAddr := backendServer(t, websocket.Handler(wsEcho))
	srv := New(Config{})
	pl := splice.NewPool(64)
	t.Cleanup(pl.Close)
	srv.SetPipes(pl)
	addr := proxyUnder(t, srv, oneRoute(newBackend(t, wsAddr)), nil)
	others := pipeFDs(t)
	const tunnels = 20
	for i := range tunnels {
		ws, err := websocket.Dial("ws://"+addr+"/echo", "", "http://"+addr+"/")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		for j := range 5 {
			msg := strings.Repeat(fmt.Sprint(i, j), 1+j*10000)
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil {
				t.Fatal(err)
			}
			if got != msg {
				t.Fatalf("tunnel %d echo %d: %d bytes, want %d", i, j, len(got), len(msg))
			}
		}
	}
	if n := pl.Open(); n > splice.FreePipes {
		t.Errorf("%d pipes open while %d tunnels wait", n, tunnels)
	}
	if n := pipeFDs(t) - others; n > 2*splice.FreePipes {
		t.Errorf("%d pipe descriptors open while %d tunnels wait", n, tunnels)
	}
}
