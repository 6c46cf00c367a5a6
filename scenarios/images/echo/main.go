// Command echo is the backend of the tenant cluster's scenarios. It
// answers on TCP (HTTP) and UDP with one line naming the pod, the client
// address it saw, the request's X-Forwarded-For (HTTP; its spaces taken
// out) and the PROXY protocol header if the connection began with one:
//
//	pod=echo-5d9c7 client=192.0.2.100:41234 fwd= proxy="PROXY TCP4 192.0.2.100 192.0.2.200 41234 80"
//
// HTTP requests to /healthz answer "ok". A request to /via?to=IP:port
// makes the pod itself, an in-cluster client, send a request to
// http://IP:port/ and answers with what it got. Flags: -http (default :8080),
// -udp (default :8081), -drain (default 3s: on SIGTERM it keeps serving
// that long, while its endpoint is removed everywhere, then stops). The
// pod name comes from $POD_NAME, else the host name.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

var pod string

func main() {
	httpAddr := flag.String("http", ":8080", "TCP address of the HTTP server")
	udpAddr := flag.String("udp", ":8081", "UDP address of the datagram echo")
	drain := flag.Duration("drain", 3*time.Second, "how long to keep serving after SIGTERM")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "echo")
	pod = os.Getenv("POD_NAME")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	pc, err := net.ListenPacket("udp", *udpAddr)
	if err != nil {
		log.Error("listen udp", "err", err)
		os.Exit(1)
	}
	go serveUDP(pc)
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Error("listen tcp", "err", err)
		os.Exit(1)
	}
	log.Info("serving", "http", ln.Addr(), "udp", pc.LocalAddr())
	srv := &http.Server{
		Handler:           http.HandlerFunc(handle),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	go func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		log.Info("terminating: serving on while the endpoint goes", "drain", *drain)
		time.Sleep(*drain)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.Serve(proxyListener{ln}); err != nil && err != http.ErrServerClosed {
		log.Error("serve", "err", err)
		os.Exit(1)
	}
}

func handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		io.WriteString(w, "ok\n")
		return
	}
	if r.URL.Path == "/via" {
		via(w, r.URL.Query().Get("to"))
		return
	}
	proxy := ""
	if c, ok := r.Context().Value(connKey{}).(*proxyConn); ok {
		proxy = c.header
	}
	fwd := strings.ReplaceAll(strings.Join(r.Header.Values("X-Forwarded-For"), ","), " ", "")
	fmt.Fprintf(w, "pod=%s client=%s fwd=%s proxy=%q\n", pod, r.RemoteAddr, fwd, proxy)
}

// via asks http://to/ from this pod and writes back the answer.
func via(w http.ResponseWriter, to string) {
	ap, err := netip.ParseAddrPort(to)
	if err != nil {
		http.Error(w, "to: want IP:port", http.StatusBadRequest)
		return
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + ap.String() + "/")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		http.Error(w, "via "+ap.String()+": "+resp.Status, http.StatusBadGateway)
		return
	}
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 4096))
}

func serveUDP(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		pc.WriteTo([]byte(fmt.Sprintf("pod=%s client=%s proxy=%q\n", pod, from, "")), from)
	}
}

type connKey struct{}

// proxyListener wraps accepted connections: a connection that begins with
// a PROXY protocol v1 line has it read and kept.
type proxyListener struct{ net.Listener }

func (l proxyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &proxyConn{Conn: c}, nil
}

type proxyConn struct {
	net.Conn
	r      *bufio.Reader
	header string
	read   bool
}

var v2sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

func (c *proxyConn) Read(p []byte) (int, error) {
	if !c.read {
		c.read = true
		c.r = bufio.NewReader(c.Conn)
		_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if b, err := c.r.Peek(6); err == nil && string(b) == "PROXY " {
			line, err := c.r.ReadString('\n')
			if err != nil {
				return 0, err
			}
			c.header = strings.TrimRight(line, "\r\n")
		} else if b, err := c.r.Peek(16); err == nil && bytes.Equal(b[:12], v2sig) {
			n := 16 + int(b[14])<<8 + int(b[15])
			raw := make([]byte, n)
			if _, err := io.ReadFull(c.r, raw); err != nil {
				return 0, err
			}
			c.header = describeV2(raw)
		}
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
	return c.r.Read(p)
}

// describeV2 prints a PROXY v2 header like a v1 line.
func describeV2(raw []byte) string {
	body := raw[16:]
	switch raw[13] >> 4 {
	case 1:
		if len(body) >= 12 {
			return fmt.Sprintf("PROXY TCP4 %s %s %d %d", net.IP(body[0:4]), net.IP(body[4:8]),
				int(body[8])<<8|int(body[9]), int(body[10])<<8|int(body[11]))
		}
	case 2:
		if len(body) >= 36 {
			return fmt.Sprintf("PROXY TCP6 %s %s %d %d", net.IP(body[0:16]), net.IP(body[16:32]),
				int(body[32])<<8|int(body[33]), int(body[34])<<8|int(body[35]))
		}
	}
	return "PROXY v2 LOCAL"
}
