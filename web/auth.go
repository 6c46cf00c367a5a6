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
	// verify, when set, replaces the one-time token: it checks a
	// CA-signed dashboard token and returns its expiry and id.
	verify func(tok string, now time.Time) (time.Time, string, error)
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

// login returns a new session id for tok, or "" when tok is refused.
// With verify set tok is a CA-signed dashboard token and the session ends
// with it (or after sessionTTL, whichever comes first); otherwise tok
// must be the unused one-time token, which it consumes.
func (a *auth) login(tok string) string {
	expires := a.now().Add(sessionTTL)
	if a.verify != nil {
		exp, _, err := a.verify(tok, a.now())
		if err != nil {
			return ""
		}
		if exp.Before(expires) {
			expires = exp
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verify == nil {
		if a.token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) != 1 {
			return ""
		}
		a.token = ""
	}
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
	a.sessions[id] = expires
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
	a.mu.Lock()
	exp := a.sessions[id]
	a.mu.Unlock()
	return &http.Cookie{
		Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: a.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: max(1, int(exp.Sub(a.now())/time.Second)),
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
