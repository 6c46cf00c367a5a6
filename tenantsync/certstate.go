package tenantsync

import (
	"slices"
	"strings"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// tlsHosts returns the hosts a load balancer serves over https (the route
// hosts, when it has an https listener), sorted.
func tlsHosts(lb *pb.LoadBalancer) []string {
	https := false
	for _, l := range lb.GetListeners() {
		https = https || l.GetProtocol() == "https"
	}
	if !https {
		return nil
	}
	var hosts []string
	for _, r := range lb.GetRoutes() {
		if h := strings.ToLower(r.GetHost()); h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return hosts
}

// certificateStates tells, for each host, which of the tenant's
// certificates covers it and in what state: a valid certificate before
// others (it is the one served), then an exact name before a wildcard.
func certificateStates(hosts []string, certs []*pb.Certificate) []*pb.CertificateState {
	out := make([]*pb.CertificateState, 0, len(hosts))
	for _, h := range hosts {
		var best *pb.Certificate
		bestRank := 0
		for _, c := range certs {
			rank := coverRank(c, h)
			if rank == 0 {
				continue
			}
			if c.GetState() == "valid" {
				rank += 2
			}
			if rank > bestRank {
				best, bestRank = c, rank
			}
		}
		st := &pb.CertificateState{Host: h, State: "missing"}
		if best != nil {
			st.Certificate = best.GetName()
			st.State = best.GetState()
			st.Issuer = best.GetIssuer()
			st.NotAfter = best.GetNotAfter()
			st.LastError = best.GetLastError()
		}
		out = append(out, st)
	}
	return out
}

// coverRank is 2 when c names host exactly, 1 when a wildcard of c covers
// it ("*.acme.example" covers one label), 0 otherwise.
func coverRank(c *pb.Certificate, host string) int {
	rank := 0
	for _, n := range c.GetHosts() {
		n = strings.ToLower(n)
		if n == host {
			return 2
		}
		if suffix, ok := strings.CutPrefix(n, "*."); ok {
			if label, rest, found := strings.Cut(host, "."); found && label != "" && rest == suffix {
				rank = 1
			}
		}
	}
	return rank
}
