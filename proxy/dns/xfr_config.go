package dns

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
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

// checkTransfers refuses secondaries, pushes and keys that do not go
// together.
func (c Config) checkTransfers() error {
	switch {
	case len(c.Secondaries) > 0 && len(c.TSIGKeys) == 0:
		return fmt.Errorf("--dns-secondaries needs --dns-tsig-keys (a file of the TSIG keys transfers are signed with): %w", ErrConfig)
	case len(c.Push) > 0 && len(c.TSIGKeys) == 0:
		return fmt.Errorf("--dns-push needs --dns-tsig-keys (a file of the TSIG keys updates are signed with): %w", ErrConfig)
	case len(c.TSIGKeys) > 0 && len(c.Secondaries) == 0 && len(c.Push) == 0:
		return fmt.Errorf("--dns-tsig-keys needs --dns-secondaries (IP[:port]=KEY of each server zones are transferred to) or --dns-push (ZONE=IP[:port]=KEY): %w", ErrConfig)
	case len(c.Secondaries) > 0 && len(c.Addrs) == 0:
		return fmt.Errorf("--dns-secondaries needs --dns-addr: %w", ErrConfig)
	case len(c.Push) > 0 && len(c.Addrs) == 0:
		return fmt.Errorf("--dns-push needs --dns-addr and --dns-zones (the records pushed are those the LB hosts answer): %w", ErrConfig)
	}
	used := map[string]bool{}
	for _, s := range c.Secondaries {
		if _, ok := c.TSIGKeys[s.Key]; !ok {
			return fmt.Errorf("--dns-secondaries %s: key %q is not in --dns-tsig-keys: add it to the file or name one there: %w", s.Addr, excerpt(s.Key), ErrConfig)
		}
		used[s.Key] = true
	}
	pushed := map[string]bool{}
	for _, p := range c.Push {
		if _, ok := c.TSIGKeys[p.Key]; !ok {
			return fmt.Errorf("--dns-push %s: key %q is not in --dns-tsig-keys: add it to the file or name one there: %w", p.Zone, excerpt(p.Key), ErrConfig)
		}
		if !slices.ContainsFunc(c.Zones, func(z string) bool { return mdns.CanonicalName(z) == p.Zone }) {
			return fmt.Errorf("--dns-push %s: not a zone of --dns-zones; only the zones this host answers are pushed: add it to --dns-zones or push one of them: %w", p.Zone, ErrConfig)
		}
		if pushed[p.Zone] {
			return fmt.Errorf("--dns-push %s: the zone is given twice; push each zone to one primary: %w", p.Zone, ErrConfig)
		}
		pushed[p.Zone], used[p.Key] = true, true
	}
	for k := range c.TSIGKeys {
		if !used[k] {
			return fmt.Errorf("--dns-tsig-keys: key %q is used by no --dns-secondaries or --dns-push entry: name it there or remove it from the file: %w", excerpt(k), ErrConfig)
		}
	}
	return nil
}

// Push is a zone whose records are pushed to an operator's primary
// server as RFC 2136 dynamic updates, signed with a TSIG key.
type Push struct {
	// Zone is canonical ("lb.acme.example.").
	Zone string
	// Server is the primary's IP:port (port 53 unless given).
	Server netip.AddrPort
	// Key is the TSIG key's name (canonical).
	Key string
}

// ParsePush reads ZONE=IP[:port]=KEY, like
// lb.acme.example=192.0.2.53=push or acme.example=[2001:db8::53]:5353=push.
func ParsePush(s string) (Push, error) {
	parts := strings.Split(strings.TrimSpace(s), "=")
	if len(parts) != 3 || strings.TrimSpace(parts[2]) == "" {
		return Push{}, fmt.Errorf("push %q: give ZONE=IP[:port]=KEY, like lb.acme.example=192.0.2.53=push (KEY a name in --dns-tsig-keys): %w", excerpt(s), ErrConfig)
	}
	zone, err := canonicalZone(parts[0])
	if err != nil {
		return Push{}, fmt.Errorf("push: %w", err)
	}
	sec, err := ParseSecondary(parts[1] + "=" + parts[2])
	if err != nil {
		return Push{}, fmt.Errorf("push %s: server %q: give IP or IP:port of the primary: %w", zone, excerpt(parts[1]), ErrConfig)
	}
	return Push{Zone: zone, Server: sec.Addr, Key: sec.Key}, nil
}

// CheckPush checks --dns-push.
func CheckPush(s string) error {
	for _, p := range List(s) {
		if _, err := ParsePush(p); err != nil {
			return err
		}
	}
	return nil
}
