package api

// DefaultWriteBytesPerSecond is quotas.writeBytesPerSecond when unset: the
// encoded bytes a second a tenant's agents may write through all the LB
// hosts' streams together (the leader keeps the budget), with a burst of
// eight seconds' worth and at least quotas.storedBytes (6 MiB at the
// defaults).
//
// An ordinary tenant never meets it: a Service's load balancer of ten
// members encodes to about 300 bytes, so 256 KiB a second is some 900
// Service changes a second, every second, and an agent's first sync of
// everything its tenant may store fits the burst. What meets it is a
// tenant that rewrites objects of megabytes over and over: each costs the
// leader's write loop, the Raft log and every host's apply in proportion
// to its bytes (a load balancer of 1.2 MB holds the loop 70-170 ms on a
// 2-core host), so at this rate such a tenant holds the loop a few
// hundredths of the time.
const DefaultWriteBytesPerSecond = 256 << 10
