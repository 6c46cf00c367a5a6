// Package web serves the embedded dashboard (go:embed) and its read-only
// JSON and server-sent-event endpoints: cluster health, VIP holders, load
// balancers with their problems, certificates and backend health.
//
// The dashboard reads only the public model; the package imports only api.
package web
