// Command coredns is CoreDNS with only the plugins the Gateway API
// conformance suite's DNS backend configures (errors, log, forward and
// whoami, in CoreDNS's own plugin order). It is the program of the
// registry.k8s.io/coredns/coredns image the conformance scenario builds;
// go.mod pins the CoreDNS release the suite's manifests name.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func init() {
	dnsserver.Directives = []string{"errors", "log", "forward", "whoami"}
}

func main() { coremain.Run() }
