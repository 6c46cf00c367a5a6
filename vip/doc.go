// Package vip decides which LB host holds each virtual IP and makes it so.
//
// Every pool has a mode. In arp mode each VIP has one holder among the
// hosts that are alive, see a majority of the cluster and are ready to
// serve it: the one that holds it already, else the first of a
// rendezvous-hash ranking of the address; the holder puts the address on
// --vip-interface and announces it with gratuitous ARP or unsolicited
// neighbour advertisements. In bgp mode every host whose data plane is
// ready, whose BGP session is up and whose committed state is current
// puts the address on a loopback or dummy interface and an embedded gobgp
// speaker announces a host route, next hop self, with the pool's
// communities, optionally a MED, and BFD towards the routers. In static
// mode the network routes the range to the hosts and nothing is
// announced.
//
// Liveness comes from UDP heartbeats between the hosts (every 20ms by
// default, dead after 5 misses), signed with a key every host derives
// from the cluster CA, independent of Raft, and sent from an OS thread of
// their own. A host that does not see a majority in two-way contact
// releases its arp VIPs before the others may take them, unless they
// cannot make a majority without it, so the two sides of a partition
// never hold a VIP at once. DESIGN.md gives the rules and the figures.
//
// The Manager takes the whole committed state (Update) and follows the
// data plane's readiness through its observed-state watch
// (Config.Observed); a decision loop turns them and the
// heartbeats into the set of VIPs to hold, and an actuator converges the
// interfaces and the speaker to that set on a goroutine of its own.
// Close hands everything over before the listeners close. The package
// imports only api.
package vip
