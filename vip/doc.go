// Package vip decides which LB host holds each virtual IP and makes it so:
// the assignment of VIPs to healthy hosts, address management through
// netlink, gratuitous ARP and unsolicited neighbour advertisements in arp
// mode, and an embedded gobgp speaker that announces routes in bgp mode.
//
// Announcers take the whole desired set and converge to it, so repeating a
// reconcile after a crash is safe. The package imports only api.
package vip
