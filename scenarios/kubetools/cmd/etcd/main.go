// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 for
// the tenant agent's tests against a real kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
