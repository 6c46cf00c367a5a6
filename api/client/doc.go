// Package client is the admin API client used by the teapot-lb CLI: the
// admin config file (server addresses and mTLS credentials, found like a
// kubeconfig), a connection that fails over between the cluster's servers,
// and the rendering of gRPC errors as one line a user can act on.
package client
