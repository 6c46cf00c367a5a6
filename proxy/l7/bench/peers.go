package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// nginxBackendConf is the member every proxy forwards to: nginx, one
// worker, a fixed 13-byte body.
func nginxBackendConf(dir string, port int) string {
	return fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
pid %[1]s/nginx-backend.pid;
error_log %[1]s/nginx-backend.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/b-body; proxy_temp_path %[1]s/b-proxy; fastcgi_temp_path %[1]s/b-fcgi;
  uwsgi_temp_path %[1]s/b-uwsgi; scgi_temp_path %[1]s/b-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen 127.0.0.1:%[2]d backlog=8192;
    location / { default_type text/plain; return 200 "hello, world\n"; }
  }
}
`, dir, port)
}

// nginxProxyConf is nginx as a reverse proxy with upstream keep-alive and
// the same forwarding fields teapot-lb sets.
func nginxProxyConf(dir string, port, backend int) string {
	return fmt.Sprintf(`worker_processes 1;
master_process off;
daemon off;
pid %[1]s/nginx-proxy.pid;
error_log %[1]s/nginx-proxy.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/p-body; proxy_temp_path %[1]s/p-proxy; fastcgi_temp_path %[1]s/p-fcgi;
  uwsgi_temp_path %[1]s/p-uwsgi; scgi_temp_path %[1]s/p-scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  upstream be {
    server 127.0.0.1:%[3]d;
    keepalive 256;
    keepalive_requests 100000000;
  }
  server {
    listen 127.0.0.1:%[2]d backlog=8192;
    location / {
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header Forwarded "for=$remote_addr;host=$host;proto=$scheme";
      proxy_set_header X-Request-Id $request_id;
    }
  }
}
`, dir, port, backend)
}

// haproxyConf is HAProxy with one thread. With headers set it adds the
// forwarding fields teapot-lb adds (X-Forwarded-For/-Proto/-Host,
// Forwarded, X-Request-Id); without, it forwards untouched. tlsPort > 0
// adds a TLS frontend with ALPN h2.
func haproxyConf(port, tlsPort, backend int, pem string, headers bool) string {
	fwd := ""
	if headers {
		fwd = `  option forwardfor
  http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header Forwarded "for=%[src];host=%[req.hdr(host)];proto=%[ssl_fc,iif(https,http)]"
  unique-id-format %{+X}o\ %ci:%cp_%fi:%fp_%Ts_%rt:%pid
  unique-id-header X-Request-Id
`
	}
	tlsBind := ""
	if tlsPort > 0 {
		tlsBind = fmt.Sprintf("  bind 127.0.0.1:%d ssl crt %s alpn h2,http/1.1\n", tlsPort, pem)
	}
	return fmt.Sprintf(`global
  nbthread 1
  maxconn 9000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  timeout http-request 10s
  timeout http-keep-alive 60s
frontend fe
  bind 127.0.0.1:%d
%s%s  default_backend be
backend be
  server s1 127.0.0.1:%d
`, port, tlsBind, fwd, backend)
}

func writeFile(dir, name, content string) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, []byte(content), 0o600)
}
