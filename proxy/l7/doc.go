// Package l7 is teapot-lb's HTTP proxy engine: HTTP/1.1 and HTTP/2 from
// clients, HTTP/1.1 (pooled keep-alive connections), HTTP/1.1 over TLS and
// HTTP/2 (h2c and h2 over TLS, multiplexed) to members, WebSocket and
// other upgrades, and gRPC.
//
// A listener hands each accepted connection to Server.ServeConn with a
// ConnInfo whose Router is read once per request, so a config swap reaches
// the next request of every open connection. The package declares what it
// needs from the rest of the data plane (Router, Backend, Member, Metrics)
// and imports none of it.
//
// HTTP/1.1 takes a purpose-built path: a zero-allocation parser over pooled
// per-connection buffers, request heads forwarded as runs of the client's
// own bytes plus the forwarding fields, bodies relayed by Content-Length or
// validated chunked passthrough (splice between bare TCP sockets for large
// ones), and member connections kept per client connection and in
// per-member pools. HTTP/2 clients are served by the package's own server
// on golang.org/x/net/http2's framer and HPACK decoder (one reading
// goroutine per connection, strict stream states, flow control and abuse
// budgets). HTTP/2 members are reached through the package's own HTTP/2
// client: a few connections per member, streams multiplexed within the
// member's SETTINGS, flow control both ways and trailers; an HTTP/2
// client's request goes to them field for field. Local handlers and
// PROXY protocol members use net/http values. DESIGN.md has the details
// and the figures.
package l7
