// Package certs terminates TLS for https listeners and manages their
// certificates: ACME certificates obtained and renewed by certmagic for the
// hosts of https listeners with acme: true, and certificates uploaded by the
// operator. Everything certmagic keeps (accounts, certificates, keys,
// challenge tokens, locks) lives in the replicated state through Storage, so
// every LB host serves what any host obtained and answers the challenges any
// host started.
//
// The package declares what it needs of the replicated state (KV, Store) and
// imports none of it: *consensus.Node satisfies both, and main passes it in.
//
// Handshakes pick the certificate by SNI among the certificates of the
// listener's own tenant only: an exact name, then a wildcard. A name the
// listener has no certificate for fails the handshake; there is no default
// certificate that could belong to another tenant. DESIGN.md has the details.
package certs
