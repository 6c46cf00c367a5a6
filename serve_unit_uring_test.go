package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// ioURingCalls are the system calls of the io_uring data path.
var ioURingCalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}

// filterGroups are the systemd syscall groups that hold the io_uring
// calls (systemd 245 and later: @aio is in @system-service).
var filterGroups = map[string][]string{
	"@aio":            ioURingCalls,
	"@system-service": {"@aio"},
}

// filterAllows reports whether an allow-list of SystemCallFilter entries
// (calls and groups) holds call, expanding groups with expand.
func filterAllows(entries []string, call string, expand func(string) []string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(e string) bool {
		if e == call {
			return true
		}
		if !strings.HasPrefix(e, "@") || seen[e] {
			return false
		}
		seen[e] = true
		return slices.ContainsFunc(expand(e), walk)
	}
	return slices.ContainsFunc(entries, walk)
}

// TestServeUnitAllowsIOURing: the unit's SystemCallFilter allows the
// io_uring calls, so data-path auto takes io_uring under the unit where
// the kernel offers it (TestAutoPicksEpollUnderSeccomp, in proxy, shows
// that a filter without them makes auto take epoll and io_uring refuse
// to start). Where systemd-analyze is installed, the groups are expanded
// by the systemd of this machine too.
func TestServeUnitAllowsIOURing(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitFile)
	var allowed, denied []string
	for _, v := range u["Service.SystemCallFilter"] {
		if d, ok := strings.CutPrefix(v, "~"); ok {
			denied = append(denied, strings.Fields(d)...)
			continue
		}
		allowed = append(allowed, strings.Fields(v)...)
	}
	static := func(g string) []string { return filterGroups[g] }
	for _, call := range ioURingCalls {
		if !filterAllows(allowed, call, static) || filterAllows(denied, call, static) {
			t.Errorf("SystemCallFilter allows %v, denies %v: %s is not allowed (data-path io_uring)", allowed, denied, call)
		}
	}
	// The check itself: a filter without @aio does not allow them.
	if filterAllows([]string{"@basic-io", "@network-io", "bpf"}, "io_uring_setup", static) {
		t.Fatal("filterAllows finds io_uring_setup in a filter without @aio")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		return
	}
	expand := func(g string) []string {
		out, err := exec.Command(analyze, "syscall-filter", g).Output()
		if err != nil {
			return nil
		}
		var names []string
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if l != "" && !strings.HasPrefix(l, "#") && l != g {
				names = append(names, l)
			}
		}
		return names
	}
	for _, call := range ioURingCalls {
		if !filterAllows(allowed, call, expand) {
			t.Errorf("this machine's systemd does not allow %s under SystemCallFilter=%v", call, allowed)
		}
	}
}
