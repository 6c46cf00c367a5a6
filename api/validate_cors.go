package api

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of a route's CORS filter (the Gateway API's own) and of an https
// listener's client certificate validation.
const (
	MaxCORSOrigins = 64
	MaxCORSMethods = 9
	MaxCORSHeaders = 64
	// MaxCORSOriginLen bounds one allowOrigins entry.
	MaxCORSOriginLen = 253
	// MaxCORSMaxAge is the longest preflight cache time, in seconds (a
	// day); DefaultCORSMaxAge is sent when maxAge is 0.
	MaxCORSMaxAge     = 86400
	DefaultCORSMaxAge = 5
	// MaxCABundleBytes and MaxCABundleCerts bound a listener's client
	// CA bundle; every LB host keeps it in memory and verifies with it.
	MaxCABundleBytes = 64 << 10
	MaxCABundleCerts = 64
)

// CORSMethods are the methods allowMethods may list (besides "*" alone).
var CORSMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}

// ClientValidationModes are the values of tls.clientValidation.mode
// ("" is require).
var ClientValidationModes = []string{"require", "optional"}

// CORSOriginProblem says why s is not an allowOrigins entry: "*", or
// http(s)://host[:port] where host is a DNS name, an IP address, "*" or
// "*." followed by a DNS name; "" when it is one.
func CORSOriginProblem(s string) string {
	if s == "*" {
		return ""
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return fmt.Sprintf("%s is not an origin: write scheme://host[:port] with scheme http or https, or \"*\"", Excerpt(s))
	}
	host := rest
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.HasSuffix(rest, "]") {
		host = rest[:i]
		p, err := strconv.ParseUint(rest[i+1:], 10, 16)
		if err != nil || p == 0 {
			return fmt.Sprintf("%s: the port must be 1 to 65535", Excerpt(s))
		}
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err == nil && a.Is6() {
			return ""
		}
		return fmt.Sprintf("%s: %s is not an IPv6 address", Excerpt(s), Excerpt(host))
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	name := strings.ToLower(host)
	if name == "*" {
		return ""
	}
	name = strings.TrimPrefix(name, "*.")
	if !IsDNSName(name) {
		return fmt.Sprintf("%s: the host must be a DNS name, an IP address, \"*\" or \"*.\" and a DNS name", Excerpt(s))
	}
	return ""
}

func checkCORS(ck *checker, f string, c *pb.CORS) {
	os := c.GetAllowOrigins()
	if !tooMany(ck, f+".allowOrigins", len(os), MaxCORSOrigins) {
		seen := map[string]bool{}
		for i, o := range os {
			of := fmt.Sprintf("%s.allowOrigins[%d]", f, i)
			if tooLong(ck, of, o, MaxCORSOriginLen) {
				continue
			}
			if why := CORSOriginProblem(o); why != "" {
				ck.invalidf(of, "%s", why)
			} else if o == "*" && len(os) > 1 {
				ck.invalidf(of, "\"*\" allows every origin; it cannot be listed with others")
			} else if seen[strings.ToLower(o)] {
				ck.invalidf(of, "%s is listed twice; keep one", Excerpt(o))
			}
			seen[strings.ToLower(o)] = true
		}
	}
	ms := c.GetAllowMethods()
	if !tooMany(ck, f+".allowMethods", len(ms), MaxCORSMethods) {
		seen := map[string]bool{}
		for i, m := range ms {
			mf := fmt.Sprintf("%s.allowMethods[%d]", f, i)
			switch {
			case m == "*" && len(ms) > 1:
				ck.invalidf(mf, "\"*\" allows every method; it cannot be listed with others")
			case m != "*" && !contains(CORSMethods, m):
				ck.invalidf(mf, "%s is not one of %s, or \"*\" alone", Excerpt(m), strings.Join(CORSMethods, ", "))
			case seen[m]:
				ck.invalidf(mf, "%s is listed twice; keep one", m)
			}
			seen[m] = true
		}
	}
	checkCORSHeaders(ck, f+".allowHeaders", c.GetAllowHeaders(), true)
	checkCORSHeaders(ck, f+".exposeHeaders", c.GetExposeHeaders(), !c.GetAllowCredentials())
	if c.GetMaxAge() > MaxCORSMaxAge {
		ck.invalidf(f+".maxAge", "%d seconds is more than %d (a day)", c.GetMaxAge(), MaxCORSMaxAge)
	}
}

// checkCORSHeaders checks a list of header names, where "*" alone stands
// for every header when wildcard is allowed.
func checkCORSHeaders(ck *checker, f string, hs []string, wildcard bool) {
	if tooMany(ck, f, len(hs), MaxCORSHeaders) {
		return
	}
	seen := map[string]bool{}
	for i, h := range hs {
		hf := fmt.Sprintf("%s[%d]", f, i)
		k := strings.ToLower(h)
		switch {
		case h == "*" && !wildcard:
			ck.invalidf(hf, "\"*\" is read by browsers as a header named * when allowCredentials is set; list the names")
		case h == "*" && len(hs) > 1:
			ck.invalidf(hf, "\"*\" stands for every header; it cannot be listed with others")
		case h == "*":
		case tooLong(ck, hf, h, MaxHeaderNameLen):
		case !IsToken(h):
			ck.invalidf(hf, "%s is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", Excerpt(h))
		case seen[k]:
			ck.invalidf(hf, "%s is listed twice; keep one", Excerpt(h))
		}
		seen[k] = true
	}
}

// ParseCABundle returns the certificates of a listener's client CA
// bundle, or why it is not a usable one (see parseCABundle).
func ParseCABundle(s string) ([]*x509.Certificate, string) {
	return parseCABundle(s, MaxCABundleCerts)
}

// CAPEMProblem says why s cannot be the caPem of an HTTPS check or of a
// pool's tls (at most MaxCheckCACerts certificates), or "".
func CAPEMProblem(s string) string {
	_, why := parseCABundle(s, MaxCheckCACerts)
	return why
}

// parseCABundle returns the certificates of a PEM bundle, or why it is not
// a usable one: without a certificate, over maxCerts, with a block that is
// not a certificate or does not parse, or with text after its last block.
func parseCABundle(s string, maxCerts int) ([]*x509.Certificate, string) {
	rest := []byte(s)
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Sprintf("holds a PEM block of type %s (block %d); give only CERTIFICATE blocks", Clip(b.Type, 32), len(out)+1)
		}
		if len(out) == maxCerts {
			return nil, fmt.Sprintf("holds more than %d certificates; give only the CAs that sign the certificates to verify", maxCerts)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Sprintf("certificate %d does not parse: %s", len(out)+1, Clip(err.Error(), MaxQuoted))
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, "holds no PEM certificate; give the CAs as PEM (-----BEGIN CERTIFICATE-----)"
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Sprintf("has text that is not PEM after certificate %d", len(out))
	}
	return out, ""
}

func checkClientValidation(ck *checker, f string, cv *pb.ClientValidation) {
	if cv == nil {
		return
	}
	if cv.GetCaBundle() == "" {
		ck.invalidf(f+".caBundle", "required: the PEM CA certificates client certificates must chain to")
	} else if !tooLong(ck, f+".caBundle", cv.GetCaBundle(), MaxCABundleBytes) {
		if _, why := ParseCABundle(cv.GetCaBundle()); why != "" {
			ck.invalidf(f+".caBundle", "%s", why)
		}
	}
	if m := cv.GetMode(); m != "" && !contains(ClientValidationModes, m) {
		ck.invalidf(f+".mode", "%s is not one of require, optional", Excerpt(m))
	}
	if h := cv.GetSubjectHeader(); h != "" {
		if checkModifiedName(ck, f+".subjectHeader", h, false) && forwardingHeader(h) {
			ck.invalidf(f+".subjectHeader", "%s is a forwarding header the load balancer sets itself; name another", Excerpt(h))
		}
	}
}

// SubjectHeaderProblem says why h cannot be a listener's subject header
// (tls.clientValidation.subjectHeader), or "".
func SubjectHeaderProblem(h string) string {
	ck := &checker{}
	checkClientValidation(ck, "subjectHeader", &pb.ClientValidation{CaBundle: "-", SubjectHeader: h})
	for _, e := range ck.errs {
		if e.Field == "subjectHeader.subjectHeader" {
			return e.Reason
		}
	}
	return ""
}

// forwardingHeader reports whether the load balancer owns the header
// name: X-Forwarded-*, Forwarded, X-Real-IP, X-Request-Id and their kin.
func forwardingHeader(h string) bool {
	k := strings.ReplaceAll(strings.ToLower(h), "_", "-")
	if k == "x-forwarded" || strings.HasPrefix(k, "x-forwarded-") {
		return true
	}
	switch k {
	case "forwarded", "x-real-ip", "x-request-id", "true-client-ip", "x-client-ip", "client-ip", "cf-connecting-ip",
		"fastly-client-ip", "x-cluster-client-ip", "x-originating-ip", "x-original-forwarded-for":
		return true
	}
	return false
}
