package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/teapot-lb/teapot-lb/proxy/cpubudget"
	"github.com/teapot-lb/teapot-lb/proxy/snapshot"
)

// Check failures.
var (
	// ErrBadStatusLine: an HTTP check got something that is not a status
	// line.
	ErrBadStatusLine = errors.New("malformed HTTP status line")
	// ErrUnexpectedStatus: an HTTP check got a status it does not accept.
	ErrUnexpectedStatus = errors.New("unexpected HTTP status")
	// ErrSelf: the member's address is one of this host's VIPs; the proxy
	// never connects to its own listeners.
	ErrSelf = errors.New("the member is a VIP of this cluster; never dialled")
)

// check runs one check of addr (its port replaced by hc.Port when set);
// tlsc is the TLS configuration of an https check, sessions the target's
// session cache (nil: none). Ending ctx ends it at once. The CPU time the
// check takes on its own thread (connecting, an https check's key
// exchange and verification, the request) is measured and charged to
// cpu, its tenant's budget: that of an https check to its handshake
// budget as well, as a signature is (its client signature, made on a
// thread of its own, is charged where it is made). Without it, a tenant's
// thousand members checked over TLS every second cost the host most of a
// core that the accountant split across the tenants that served
// requests.
func check(ctx context.Context, dial dialFunc, addr netip.AddrPort, hc *snapshot.HealthCheck, tlsc *tlsEntry, sessions tls.ClientSessionCache, cpu *cpubudget.Tenant) (err error) {
	cost := cpubudget.Measure(func() { err = checkOnce(ctx, dial, addr, hc, tlsc, sessions, cpu) })
	if hc.TLS {
		cpu.ChargeHandshake(cost)
	} else {
		cpu.ChargeDirect(cost)
	}
	return err
}

// checkOnce is check without its charge. An https check computes on one
// of its tenant's slots (computeConn).
func checkOnce(ctx context.Context, dial dialFunc, addr netip.AddrPort, hc *snapshot.HealthCheck, tlsc *tlsEntry, sessions tls.ClientSessionCache, cpu *cpubudget.Tenant) error {
	if hc.Port != 0 {
		addr = netip.AddrPortFrom(addr.Addr(), hc.Port)
	}
	if hc.TLS && (tlsc == nil || tlsc.err != nil) {
		if tlsc == nil {
			return fmt.Errorf("%w: no TLS configuration", ErrCheckTLSConfig)
		}
		return tlsc.err
	}
	deadline := time.Now().Add(hc.Timeout)
	d := net.Dialer{Deadline: deadline}
	var raw net.Conn
	var err error
	if dial != nil {
		raw, err = dial(ctx, &d, "tcp", addr.String())
	} else {
		raw, err = d.DialContext(ctx, "tcp", addr.String())
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer raw.Close()
	defer context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })()
	if !hc.HTTP {
		return nil
	}
	if err := raw.SetDeadline(deadline); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	c := raw
	if hc.TLS {
		cc := &computeConn{Conn: raw, ctx: ctx, cpu: cpu, deadline: deadline}
		if !cc.take() {
			return fmt.Errorf("TLS handshake: %w", context.Cause(ctx))
		}
		defer cc.release()
		conf := tlsc.conf.Clone()
		conf.ServerName = serverName(hc, addr)
		conf.ClientSessionCache = sessions
		tc := tls.Client(cc, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
		c = tc
	}
	host := hc.Host
	if host == "" {
		host = addr.String()
	}
	req := "GET " + hc.Path + " HTTP/1.1\r\nHost: " + host +
		"\r\nUser-Agent: teapot-lb-health\r\nAccept: */*\r\nConnection: close\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	line, err := bufio.NewReaderSize(c, 512).ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("read status line: %w", err)
	}
	code, err := ParseStatusLine(line)
	if err != nil {
		return err
	}
	if !statusOK(code, hc.ExpectStatus) {
		return fmt.Errorf("%w %d", ErrUnexpectedStatus, code)
	}
	return nil
}

func statusOK(code, want int) bool {
	if want != 0 {
		return code == want
	}
	return code >= 200 && code < 400
}

// ParseStatusLine returns the code of an HTTP/1.x status line
// ("HTTP/1.1 200 OK\r\n"; the reason and line end are optional).
func ParseStatusLine(line []byte) (int, error) {
	const proto = "HTTP/1."
	if len(line) < len(proto)+5 || string(line[:len(proto)]) != proto ||
		line[len(proto)] < '0' || line[len(proto)] > '9' || line[len(proto)+1] != ' ' {
		return 0, ErrBadStatusLine
	}
	digits := line[len(proto)+2:]
	code := 0
	for i := range 3 {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, ErrBadStatusLine
		}
		code = code*10 + int(c-'0')
	}
	if rest := digits[3:]; len(rest) > 0 && rest[0] != ' ' && rest[0] != '\r' && rest[0] != '\n' {
		return 0, ErrBadStatusLine
	}
	if code < 100 {
		return 0, ErrBadStatusLine
	}
	return code, nil
}

// dialFunc makes a check's connection as d would (nil: d itself).
type dialFunc func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error)

// dialer is the dial of tenant's checks (nil without Options.Dial).
func (r *Registry) dialer(tenant string) dialFunc {
	if r.o.Dial == nil {
		return nil
	}
	return func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
		return r.o.Dial(ctx, tenant, d, network, addr)
	}
}

// computeConn is an https check's connection: the check holds one of its
// tenant's slots of background computing (cpubudget.Tenant.Compute) while
// it computes (the key exchange, verifying the member's certificate,
// writing), and gives it back while it waits for the member. The time it
// waited for a slot is added to its deadline: a tenant's own queue delays
// its checks, it never fails them.
type computeConn struct {
	net.Conn
	ctx      context.Context
	cpu      *cpubudget.Tenant
	deadline time.Time
	held     bool
}

func (c *computeConn) Read(p []byte) (int, error) {
	c.release()
	n, err := c.Conn.Read(p)
	if !c.take() && err == nil {
		err = context.Cause(c.ctx)
	}
	return n, err
}

// take waits for a slot and moves the deadline by the wait; false: ctx
// ended first.
func (c *computeConn) take() bool {
	waited, ok := c.cpu.Compute(c.ctx)
	if !ok {
		return false
	}
	c.held = true
	if waited > 0 {
		c.deadline = c.deadline.Add(waited)
		_ = c.Conn.SetDeadline(c.deadline)
		if c.ctx.Err() != nil { // ended as the deadline moved: end the check now
			_ = c.Conn.SetDeadline(time.Unix(1, 0))
		}
	}
	return true
}

// release gives the slot back, if held.
func (c *computeConn) release() {
	if c.held {
		c.held = false
		c.cpu.ComputeDone()
	}
}
