package bfd

import "golang.org/x/sys/unix"

func unixSetTTL(fd, n int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, n) }
