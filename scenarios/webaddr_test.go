package scenarios

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/teapot-lb/teapot-lb/api/client"
	"github.com/teapot-lb/teapot-lb/api/pki"
)

// TestServeWebAddr runs a real host with --web-addr and logs in to its
// HTTPS dashboard with tokens from `teapot-lb dashboard token`: nothing
// is readable without one, a token from the cluster opens a session whose
// JSON endpoint answers, and a token that expired (and its session) is
// refused.
func TestServeWebAddr(t *testing.T) {
	parallelScenarioWaiting(t) // a minute of it for a token to expire
	c := newCluster(t)
	n := c.newNode()
	webAddr := freeAddrs(t, 1)[0]
	c.start(n, "--web-addr", webAddr)
	c.waitMember(n)

	cfg, err := client.LoadConfig(c.adminConf())
	if err != nil {
		t.Fatal(err)
	}
	caPEM := []byte(cfg.CA)
	if !strings.Contains(cfg.CA, "BEGIN CERTIFICATE") {
		if caPEM, err = os.ReadFile(cfg.CA); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("admin.conf carries no CA certificate")
	}
	base := "https://" + webAddr
	// A browser would need the host's name; the certificate names
	// pki.ServerName and chains to the cluster CA.
	newClient := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{
			Jar: jar, Timeout: 10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: pki.ServerName}},
		}
	}
	get := func(hc *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}

	anon := newClient()
	waitFor(t, 30*time.Second, "the dashboard answers on "+webAddr, func() error {
		resp, err := anon.Get(base + "/api/snapshot")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	for _, p := range []string{"/", "/api/snapshot", "/api/stream", "/static/app.js"} {
		if code, _ := get(anon, p); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, code)
		}
	}
	if code, body := get(anon, "/login"); code != http.StatusUnauthorized || !strings.Contains(body, "dashboard token") {
		t.Errorf("GET /login: %d %q, want 401 and the login form", code, body)
	}
	if code, _ := get(anon, "/login?token=tlbd1.e30.AAAA"); code != http.StatusForbidden {
		t.Errorf("forged token: %d, want 403", code)
	}

	token := func(ttl string) string {
		out, err := c.cli(n, "dashboard", "token", "--ttl", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	if _, err := c.cli(n, "dashboard", "token", "--ttl", "10s"); err == nil || !strings.Contains(err.Error(), "--ttl") {
		t.Errorf("--ttl 10s: err = %v, want a refusal naming --ttl", err)
	}

	// A one-hour token: the login form posts it; the JSON answers.
	hour := newClient()
	resp, err := hour.PostForm(base+"/login", url.Values{"token": {token("1h")}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("login with a 1h token: %d at %s, want the dashboard", resp.StatusCode, resp.Request.URL)
	}
	var cookie *http.Cookie
	for _, ck := range resp.Request.Response.Cookies() {
		cookie = ck
	}
	if cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge <= 3500 || cookie.MaxAge > 3600 {
		t.Fatalf("session cookie = %+v, want HttpOnly Secure SameSite=Strict ending with the token", cookie)
	}
	waitFor(t, 30*time.Second, "the dashboard's snapshot lists n1", func() error {
		code, body := get(hour, "/api/snapshot")
		if code != http.StatusOK {
			return fmt.Errorf("GET /api/snapshot: %d %s", code, body)
		}
		var v struct {
			Snapshot struct {
				Cluster struct {
					Nodes []struct {
						ID string `json:"id"`
					} `json:"nodes"`
				} `json:"cluster"`
			} `json:"snapshot"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return errStop(fmt.Errorf("snapshot is not JSON: %v", err))
		}
		if len(v.Snapshot.Cluster.Nodes) != 1 || v.Snapshot.Cluster.Nodes[0].ID != n.id {
			return fmt.Errorf("nodes = %+v", v.Snapshot.Cluster.Nodes)
		}
		return nil
	})

	// A one-minute token: its login URL works, then the token and its
	// session end together.
	short := token("1m")
	issued := time.Now()
	minute := newClient()
	if code, _ := get(minute, "/login?token="+url.QueryEscape(short)); code != http.StatusOK {
		t.Fatalf("login with a 1m token: %d", code)
	}
	if code, _ := get(minute, "/api/snapshot"); code != http.StatusOK {
		t.Fatalf("snapshot in the 1m session: %d", code)
	}
	time.Sleep(time.Until(issued.Add(62 * time.Second)))
	if code, _ := get(minute, "/api/snapshot"); code != http.StatusUnauthorized {
		t.Errorf("snapshot after the token expired: %d, want 401", code)
	}
	if code, _ := get(newClient(), "/login?token="+url.QueryEscape(short)); code != http.StatusForbidden {
		t.Errorf("login with an expired token: %d, want 403", code)
	}
	if code, _ := get(hour, "/api/snapshot"); code != http.StatusOK {
		t.Errorf("the 1h session after the 1m token expired: %d, want 200", code)
	}
}
