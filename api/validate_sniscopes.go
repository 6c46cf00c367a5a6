package api

import (
	"fmt"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// MaxSNIScopes bounds listeners[].tls.sniScopes.
const MaxSNIScopes = 64

// checkSNIScopes checks the sniScopes of an https listener: at most
// MaxSNIScopes host names, each empty, exact or "*.suffix" (lower case,
// as route hosts), none twice.
func checkSNIScopes(ck *checker, f string, scopes []string) {
	f += ".tls.sniScopes"
	if len(scopes) == 0 || tooMany(ck, f, len(scopes), MaxSNIScopes) {
		return
	}
	seen := make(map[string]int, len(scopes))
	for i, h := range scopes {
		fi := fmt.Sprintf("%s[%d]", f, i)
		if tooLong(ck, fi, h, MaxHostLen) || !checkRouteHost(ck, fi, h) {
			continue
		}
		if j, dup := seen[h]; dup {
			ck.invalidf(fi, "%q is already listed as sniScopes[%d]", h, j)
			continue
		}
		seen[h] = i
	}
}

// usesSNIScopes reports whether a listener checks requests against its
// connection's server name.
func usesSNIScopes(l *pb.Listener) bool { return len(l.GetTls().GetSniScopes()) > 0 }
