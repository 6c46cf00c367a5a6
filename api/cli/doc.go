// Package cli holds the operator commands of the teapot-lb binary: apply,
// get, delete, tenant, pool, lb, cluster, version and completion. They talk
// to the cluster's admin API through package client; the server side
// (serve, agent) is added to the same root by the main package.
//
// Output is a table by default, or JSON or YAML with -o where the command
// prints data. Errors are returned from the commands; Main prints them as
// one line and turns them into the exit code.
package cli
