package dns

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	mdns "github.com/miekg/dns"
)

// MinTSIGSecret is the shortest TSIG secret accepted (bytes): HMAC-SHA256
// wants a key as long as its output.
const MinTSIGSecret = 32

// Secondary is a server the zones are transferred to: only from its
// address, only signed with its key, and NOTIFY goes to it on change.
type Secondary struct {
	// Addr is where NOTIFY goes (port 53 unless given); transfers are
	// allowed from its address, any port.
	Addr netip.AddrPort
	// Key is the TSIG key's name (canonical, "xfr.").
	Key string
}

// ParseSecondary reads IP[:port]=KEY, like 192.0.2.10=xfr-key or
// [2001:db8::10]:5300=xfr-key.
func ParseSecondary(s string) (Secondary, error) {
	addr, key, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok || strings.TrimSpace(key) == "" {
		return Secondary{}, fmt.Errorf("secondary %q: give IP[:port]=KEY, like 192.0.2.10=xfr (KEY a name in --dns-tsig-keys): %w", excerpt(s), ErrConfig)
	}
	addr = strings.TrimSpace(addr)
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		a, err2 := netip.ParseAddr(strings.Trim(addr, "[]"))
		if err2 != nil {
			return Secondary{}, fmt.Errorf("secondary %q: give an IP address, or IP:port for NOTIFY to another port: %w", excerpt(addr), ErrConfig)
		}
		ap = netip.AddrPortFrom(a, 53)
	}
	if ap.Port() == 0 {
		return Secondary{}, fmt.Errorf("secondary %q: port 0: give the port it answers NOTIFY on (default 53): %w", excerpt(addr), ErrConfig)
	}
	return Secondary{Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Key: mdns.CanonicalName(strings.TrimSpace(key))}, nil
}

// CheckSecondaries checks --dns-secondaries.
func CheckSecondaries(s string) error {
	for _, p := range List(s) {
		if _, err := ParseSecondary(p); err != nil {
			return err
		}
	}
	return nil
}

var (
	keyClause = regexp.MustCompile(`(?s)key\s+"?([A-Za-z0-9._-]+)"?\s*\{(.*?)\}\s*;`)
	keyAlg    = regexp.MustCompile(`algorithm\s+"?([A-Za-z0-9.-]+)"?\s*;`)
	keySecret = regexp.MustCompile(`secret\s+"([A-Za-z0-9+/=]+)"\s*;`)
)

// ReadTSIGKeys reads the TSIG keys of a file as BIND's tsig-keygen
// writes them (key "NAME" { algorithm hmac-sha256; secret "..."; };), so
// that one file serves both named.conf and teapot-lb. Only hmac-sha256
// is taken; the secret is at least MinTSIGSecret bytes. The result maps
// each canonical key name to its base64 secret.
func ReadTSIGKeys(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--dns-tsig-keys: %w", err)
	}
	return ParseTSIGKeys(string(b))
}

// ParseTSIGKeys parses the text of a key file (see ReadTSIGKeys).
func ParseTSIGKeys(text string) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range keyClause.FindAllStringSubmatch(text, -1) {
		name := mdns.CanonicalName(m[1])
		alg := keyAlg.FindStringSubmatch(m[2])
		if alg == nil || !strings.EqualFold(strings.TrimSuffix(alg[1], "."), "hmac-sha256") {
			return nil, fmt.Errorf("--dns-tsig-keys: key %q: give algorithm hmac-sha256 (tsig-keygen -a hmac-sha256 %s): %w", excerpt(m[1]), excerpt(m[1]), ErrConfig)
		}
		sec := keySecret.FindStringSubmatch(m[2])
		if sec == nil {
			return nil, fmt.Errorf("--dns-tsig-keys: key %q: no secret \"BASE64\"; (tsig-keygen writes one): %w", excerpt(m[1]), ErrConfig)
		}
		raw, err := base64.StdEncoding.DecodeString(sec[1])
		if err != nil || len(raw) < MinTSIGSecret {
			return nil, fmt.Errorf("--dns-tsig-keys: key %q: the secret must be base64 of at least %d bytes (tsig-keygen -a hmac-sha256 makes one): %w", excerpt(m[1]), MinTSIGSecret, ErrConfig)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--dns-tsig-keys: key %q given twice: %w", excerpt(m[1]), ErrConfig)
		}
		out[name] = sec[1]
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--dns-tsig-keys: no key \"NAME\" { algorithm hmac-sha256; secret \"...\"; }; in the file (tsig-keygen -a hmac-sha256 NAME writes one): %w", ErrConfig)
	}
	return out, nil
}

// checkTransfers refuses secondaries and keys that do not go together.
func (c Config) checkTransfers() error {
	switch {
	case len(c.Secondaries) > 0 && len(c.TSIGKeys) == 0:
		return fmt.Errorf("--dns-secondaries needs --dns-tsig-keys (a file of the TSIG keys transfers are signed with): %w", ErrConfig)
	case len(c.TSIGKeys) > 0 && len(c.Secondaries) == 0:
		return fmt.Errorf("--dns-tsig-keys needs --dns-secondaries (IP[:port]=KEY of each server zones are transferred to): %w", ErrConfig)
	case len(c.Secondaries) > 0 && len(c.Addrs) == 0:
		return fmt.Errorf("--dns-secondaries needs --dns-addr: %w", ErrConfig)
	}
	used := map[string]bool{}
	for _, s := range c.Secondaries {
		if _, ok := c.TSIGKeys[s.Key]; !ok {
			return fmt.Errorf("--dns-secondaries %s: key %q is not in --dns-tsig-keys: add it to the file or name one there: %w", s.Addr, excerpt(s.Key), ErrConfig)
		}
		used[s.Key] = true
	}
	for k := range c.TSIGKeys {
		if !used[k] {
			return fmt.Errorf("--dns-tsig-keys: key %q is used by no --dns-secondaries entry: name it there or remove it from the file: %w", excerpt(k), ErrConfig)
		}
	}
	return nil
}
