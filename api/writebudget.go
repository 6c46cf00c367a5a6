package api

// DefaultWriteBytesPerSecond is quotas.writeBytesPerSecond when unset: the
// encoded bytes a second a tenant's agent may write through one LB host's
// stream, with a burst of eight seconds' worth and at least
// quotas.storedBytes (8 MiB at the defaults).
//
// An ordinary tenant never meets it: a Service's load balancer of ten
// members encodes to about 300 bytes, so the objects bucket of the stream
// (2,000 a second) lets through about 600 KB a second of them, and an
// agent's first sync of everything its tenant may store (storedBytes, 6
// MiB) fits the burst. What meets it is a tenant that rewrites objects of
// megabytes (1,000 routes of long paths, pools of 1,000 members) over and
// over: each costs the leader's write loop, the Raft log and every host's
// apply in proportion to its bytes, and at 1 MiB a second such a tenant
// holds the write loop a small share of the time.
const DefaultWriteBytesPerSecond = 1 << 20
