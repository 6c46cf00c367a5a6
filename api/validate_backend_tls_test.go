package api

import (
	"strings"
	"testing"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func TestValidateBackendTLS(t *testing.T) {
	t.Parallel()
	ca, caKey := selfSigned(t, "member CA")
	withTLS := func(proto string, mut func(b *pb.BackendTLS)) func(lb *pb.LoadBalancer) {
		return func(lb *pb.LoadBalancer) {
			b := &pb.BackendTLS{CaPem: ca, ServerName: "web.acme.example"}
			mut(b)
			lb.Pools["web"].BackendProtocol = proto
			lb.Pools["web"].Tls = b
		}
	}
	sans := func(n int) []*pb.SubjectAltName {
		out := make([]*pb.SubjectAltName, n)
		for i := range out {
			out[i] = &pb.SubjectAltName{Hostname: "web.acme.example"}
		}
		return out
	}
	f := "pools.web.tls"
	tests := []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"CA and server name", withTLS("tls", func(*pb.BackendTLS) {}), pass()},
		{"h2 members", withTLS("h2", func(*pb.BackendTLS) {}), pass()},
		{"system roots", withTLS("tls", func(b *pb.BackendTLS) { b.CaPem, b.SystemRoots = "", true }), pass()},
		{"hostname, wildcard and URI SANs", withTLS("tls", func(b *pb.BackendTLS) {
			b.SubjectAltNames = []*pb.SubjectAltName{{Hostname: "web.acme.example"}, {Hostname: "*.acme.example"}, {Uri: "spiffe://acme.example/web"}}
		}), pass()},
		{"cleartext members", withTLS("", func(*pb.BackendTLS) {}), bad(f, "set backendProtocol: tls")},
		{"h2c members", withTLS("h2c", func(*pb.BackendTLS) {}), bad(f, `backendProtocol is "h2c"`)},
		{"no CA", withTLS("tls", func(b *pb.BackendTLS) { b.CaPem = "" }), bad(f+".caPem", "or set systemRoots: true")},
		{"CA and system roots", withTLS("tls", func(b *pb.BackendTLS) { b.SystemRoots = true }), bad(f+".systemRoots", "keep one")},
		{"CA not PEM", withTLS("tls", func(b *pb.BackendTLS) { b.CaPem = "hello" }), bad(f+".caPem", "holds no PEM certificate")},
		{"CA holds a key", withTLS("tls", func(b *pb.BackendTLS) { b.CaPem = ca + caKey }), bad(f+".caPem", "type PRIVATE KEY")},
		{"CA too big", withTLS("tls", func(b *pb.BackendTLS) { b.CaPem = strings.Repeat(ca, MaxBackendCAPEMLen/len(ca)+1) }), bad(f+".caPem", "at most 65536")},
		{"no server name", withTLS("tls", func(b *pb.BackendTLS) { b.ServerName = "" }), bad(f+".serverName", "is empty")},
		{"server name not a name", withTLS("tls", func(b *pb.BackendTLS) { b.ServerName = "bad name" }), bad(f+".serverName", "is not a DNS name")},
		{"too many SANs", withTLS("tls", func(b *pb.BackendTLS) { b.SubjectAltNames = sans(MaxBackendSANs + 1) }), bad(f+".subjectAltNames", "16")},
		{"SAN with both", withTLS("tls", func(b *pb.BackendTLS) {
			b.SubjectAltNames = []*pb.SubjectAltName{{Hostname: "a.example", Uri: "spiffe://a/b"}}
		}), bad(f+".subjectAltNames[0]", "give one per entry")},
		{"empty SAN", withTLS("tls", func(b *pb.BackendTLS) { b.SubjectAltNames = []*pb.SubjectAltName{{}} }), bad(f+".subjectAltNames[0]", "is empty")},
		{"SAN hostname not a name", withTLS("tls", func(b *pb.BackendTLS) {
			b.SubjectAltNames = []*pb.SubjectAltName{{Hostname: "Bad_Name"}}
		}), bad(f+".subjectAltNames[0].hostname", "")},
		{"SAN URI relative", withTLS("tls", func(b *pb.BackendTLS) {
			b.SubjectAltNames = []*pb.SubjectAltName{{Uri: "/web"}}
		}), bad(f+".subjectAltNames[0].uri", "not an absolute URI")},
		{"SAN URI too long", withTLS("tls", func(b *pb.BackendTLS) {
			b.SubjectAltNames = []*pb.SubjectAltName{{Uri: "spiffe://a/" + strings.Repeat("x", MaxSANURILen)}}
		}), bad(f+".subjectAltNames[0].uri", "at most 2048")},
	}
	c := baseCatalog()
	c.Put(&pb.Certificate{Tenant: "acme", Name: "members-client"})
	tests = append(tests, []struct {
		name string
		mut  func(lb *pb.LoadBalancer)
		want expect
	}{
		{"client certificate", withTLS("tls", func(b *pb.BackendTLS) { b.ClientCertificate = "members-client" }), pass()},
		{"client certificate not uploaded", withTLS("tls", func(b *pb.BackendTLS) { b.ClientCertificate = "nope" }), bad(f+".clientCertificate", "upload it first")},
		{"pool of a tcp listener", func(lb *pb.LoadBalancer) {
			withTLS("tls", func(*pb.BackendTLS) {})(lb)
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 5432, Protocol: "tcp", Pool: "web"})
		}, bad(f, "(tcp) forwards bytes to this pool")},
		{"pool of a tls-passthrough sniRoute", func(lb *pb.LoadBalancer) {
			withTLS("tls", func(*pb.BackendTLS) {})(lb)
			lb.Pools["other"] = &pb.BackendPool{Members: lb.Pools["web"].Members}
			lb.Listeners = append(lb.Listeners, &pb.Listener{Port: 8443, Protocol: "tls-passthrough", Pool: "other",
				SniRoutes: []*pb.SNIRoute{{Host: "web.acme.example", Pool: "web"}}})
		}, bad(f, "sniRoutes[0] (tls-passthrough) forwards bytes")},
		{"client certificate not a name", withTLS("tls", func(b *pb.BackendTLS) { b.ClientCertificate = "Bad Name" }), bad(f+".clientCertificate", "is not a certificate name")},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := shopLB()
			tt.mut(lb)
			check(t, ValidateLoadBalancer(lb, c), tt.want)
		})
	}
}

func TestFeaturesUsedBackendTLS(t *testing.T) {
	t.Parallel()
	lb := shopLB()
	lb.Pools["web"].BackendProtocol = "tls"
	lb.Pools["web"].Tls = &pb.BackendTLS{SystemRoots: true, ServerName: "web.acme.example"}
	uses := FeaturesUsed(Wrap(lb))
	found := false
	for _, u := range uses {
		if u.Feature == FeatureBackendTLS && strings.HasSuffix(u.Field, "pools.web.tls") {
			found = true
		}
	}
	if !found || LevelNeeded(uses) != 5 {
		t.Fatalf("uses %v (level %d), want pools.web.tls at level 5", uses, LevelNeeded(uses))
	}
}
