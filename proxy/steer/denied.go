package steer

import (
	"os"
	"strconv"
	"strings"
)

// Capability bits of /proc/self/status's CapEff.
const (
	capSysAdmin = 21
	capBPF      = 39
)

// deniedCause names why the kernel answered bpf(2) with EPERM in this
// process, from its /proc/self/status: a capability it lacks, a seccomp
// syscall filter (systemd's SystemCallFilter=), or, when it has both the
// capability and no filter, the kernel's own policy.
func deniedCause(status string) string {
	var capEff uint64
	seccomp := ""
	for _, l := range strings.Split(status, "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "CapEff":
			capEff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		case "Seccomp":
			seccomp = strings.TrimSpace(v)
		}
	}
	filtered := seccomp == "2"
	privileged := capEff&(1<<capBPF) != 0 || capEff&(1<<capSysAdmin) != 0
	switch {
	case !privileged && filtered:
		return "this process lacks CAP_BPF (grant it: the unit's AmbientCapabilities=CAP_BPF), and a seccomp syscall filter is in force that may refuse bpf(2) too (under systemd: SystemCallFilter=@system-service bpf)"
	case !privileged:
		return "this process lacks CAP_BPF (grant it: the unit's AmbientCapabilities=CAP_BPF; with kernel.unprivileged_bpf_disabled set, only a process holding it may call bpf(2))"
	case filtered:
		return "this process holds CAP_BPF, so a seccomp syscall filter refuses bpf(2): under systemd, allow it with SystemCallFilter=@system-service bpf"
	}
	return "this process holds CAP_BPF and no syscall filter is in force: the kernel's policy refuses bpf(2) (a security module such as SELinux or AppArmor, or kernel lockdown)"
}

// selfDeniedCause is deniedCause for this process.
func selfDeniedCause() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "CAP_BPF missing, or a seccomp syscall filter refusing bpf(2) (under systemd: SystemCallFilter=@system-service bpf)"
	}
	return deniedCause(string(b))
}
