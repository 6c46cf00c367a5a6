package dns

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Settings are serve's DNS flags as the command line and the file give
// them: lists are comma-separated.
type Settings struct {
	Addrs, Zones, NameServers string
	TTL                       time.Duration
	// ResponsesPerSecond 0 turns response-rate limiting off.
	ResponsesPerSecond, Slip, QueriesPerTenant int
	// Secondaries is IP[:port]=KEY, comma-separated; TSIGKeys the path of
	// a file of keys as tsig-keygen writes them.
	Secondaries, TSIGKeys string
	// DNSSEC is the zones to sign, comma-separated; SignaturesPerTenant
	// the new signatures a second for one tenant's names (0: default).
	DNSSEC              string
	SignaturesPerTenant int
	// Push is ZONE=IP[:port]=KEY, comma-separated.
	Push string
}

// List splits a comma-separated setting.
func List(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CheckAddrs checks --dns-addr: IP:port, comma-separated.
func CheckAddrs(s string) error {
	for _, a := range List(s) {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("%q: give IP:port, like 192.0.2.53:53: %w", excerpt(a), ErrConfig)
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: give an IP address, not a name: %w", excerpt(a), ErrConfig)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%q: the port is 0 to 65535: %w", excerpt(a), ErrConfig)
		}
	}
	return nil
}

// CheckZones checks --dns-zones.
func CheckZones(s string) error {
	for _, z := range List(s) {
		if err := CheckZone(z); err != nil {
			return err
		}
	}
	return nil
}

// CheckNameServers checks --dns-ns: NAME=IP, comma-separated.
func CheckNameServers(s string) error {
	for _, n := range List(s) {
		if _, err := ParseNameServer(n); err != nil {
			return err
		}
	}
	return nil
}

// Config turns the settings into a Config (without State and Logger),
// or refuses them.
func (st Settings) Config() (Config, error) {
	c := Config{Addrs: List(st.Addrs), TTL: st.TTL, Slip: st.Slip, QueriesPerTenant: st.QueriesPerTenant}
	for _, z := range List(st.Zones) {
		cz, err := canonicalZone(z)
		if err != nil {
			return Config{}, fmt.Errorf("--dns-zones: %w", err)
		}
		c.Zones = append(c.Zones, cz)
	}
	var nss []NameServer
	for _, n := range List(st.NameServers) {
		ns, err := ParseNameServer(n)
		if err != nil {
			return Config{}, fmt.Errorf("--dns-ns: %w", err)
		}
		nss = append(nss, ns)
	}
	c.NameServers = MergeNameServers(nss)
	switch {
	case st.ResponsesPerSecond < 0:
		return Config{}, fmt.Errorf("--dns-responses-per-second %d: give a rate, or 0 to turn response-rate limiting off (default %d): %w",
			st.ResponsesPerSecond, DefaultResponsesPerSecond, ErrConfig)
	case st.ResponsesPerSecond == 0:
		c.ResponsesPerSecond = -1
	default:
		c.ResponsesPerSecond = st.ResponsesPerSecond
	}
	for _, p := range List(st.Secondaries) {
		sec, err := ParseSecondary(p)
		if err != nil {
			return Config{}, fmt.Errorf("--dns-secondaries: %w", err)
		}
		c.Secondaries = append(c.Secondaries, sec)
	}
	if st.TSIGKeys != "" {
		keys, err := ReadTSIGKeys(st.TSIGKeys)
		if err != nil {
			return Config{}, err
		}
		c.TSIGKeys = keys
	}
	for _, p := range List(st.Push) {
		ps, err := ParsePush(p)
		if err != nil {
			return Config{}, fmt.Errorf("--dns-push: %w", err)
		}
		c.Push = append(c.Push, ps)
	}
	for _, z := range List(st.DNSSEC) {
		cz, err := canonicalZone(z)
		if err != nil {
			return Config{}, fmt.Errorf("--dns-dnssec: %w", err)
		}
		if !slices.Contains(c.DNSSEC, cz) {
			c.DNSSEC = append(c.DNSSEC, cz)
		}
	}
	c.SignaturesPerTenant = st.SignaturesPerTenant
	if err := CheckAddrs(st.Addrs); err != nil {
		return Config{}, fmt.Errorf("--dns-addr: %w", err)
	}
	return c, c.Check()
}
