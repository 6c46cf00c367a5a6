package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"
)

// Login limits. A login token is good for one login; a session lasts
// sessionTTL and at most maxSessions exist at once (the oldest goes).
const (
	sessionTTL  = 12 * time.Hour
	maxSessions = 16
	cookieName  = "teapot_lb_session"
)

// auth exchanges the per-run login token for a session cookie and checks
// the cookie on every other request.
type auth struct {
	mu       sync.Mutex
	token    string // "" once used
	sessions map[string]time.Time
	now      func() time.Time
	secure   bool
}

func newAuth(now func() time.Time, secure bool) (*auth, error) {
	tok, err := randomString()
	if err != nil {
		return nil, err
	}
	return &auth{token: tok, sessions: map[string]time.Time{}, now: now, secure: secure}, nil
}

func randomString() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// LoginToken returns the one-time login token ("" once it was used).
func (a *auth) loginToken() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token
}

// login consumes tok and returns a new session id, or "" when tok is not
// the unused login token.
func (a *auth) login(tok string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) != 1 {
		return ""
	}
	a.token = ""
	id, err := randomString()
	if err != nil {
		return ""
	}
	a.expireLocked()
	if len(a.sessions) >= maxSessions {
		var oldest string
		for s, exp := range a.sessions {
			if oldest == "" || exp.Before(a.sessions[oldest]) {
				oldest = s
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[id] = a.now().Add(sessionTTL)
	return id
}

func (a *auth) expireLocked() {
	now := a.now()
	for s, exp := range a.sessions {
		if !now.Before(exp) {
			delete(a.sessions, s)
		}
	}
}

// valid reports whether the request carries a live session cookie.
func (a *auth) valid(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[c.Value]
	if !ok {
		return false
	}
	if !a.now().Before(exp) {
		delete(a.sessions, c.Value)
		return false
	}
	return true
}

func (a *auth) cookie(id string) *http.Cookie {
	return &http.Cookie{
		Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: a.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second),
	}
}

// localHost reports whether the Host header names a loopback address or
// localhost. The dashboard answers nothing else, so a web page that
// rebinds its own DNS name to 127.0.0.1 cannot read it.
func localHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
