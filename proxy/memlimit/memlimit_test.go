package memlimit

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	avail := func() (uint64, error) { return 8 << 30, nil }
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "1536MiB", want: 1536 << 20},
		{in: "2GiB", want: 2 << 30},
		{in: " 1 TiB ", want: 1 << 40},
		{in: "131072KiB", want: 128 << 20},
		{in: "134217728", want: 128 << 20},
		{in: "134217728B", want: 128 << 20},
		{in: "75%", want: 6 << 30},
		{in: "100%", want: 8 << 30},
		{in: "12.5%", want: 1 << 30},
		{in: "32MiB", err: "below 64 MiB"},
		{in: "0", err: "below 64 MiB"},
		{in: "0%", err: "percentage above 0"},
		{in: "101%", err: "at most 100"},
		{in: "NaN%", err: "percentage"},
		{in: "2GB", err: "KiB, MiB, GiB"},
		{in: "-1GiB", err: "KiB, MiB, GiB"},
		{in: "99999999999TiB", err: "KiB, MiB, GiB"},
		{in: "lots", err: "KiB, MiB, GiB"},
	} {
		got, err := Parse(tc.in, avail)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	_, err := Parse("50%", func() (uint64, error) { return 0, errors.New("no meminfo") })
	if err == nil || !strings.Contains(err.Error(), "give a size") {
		t.Errorf("a share without the memory available: %v", err)
	}
}

// TestSet: a limit given is the runtime's; none leaves the runtime's.
func TestSet(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	got, err := Set("3GiB")
	if err != nil || got != 3<<30 || debug.SetMemoryLimit(-1) != 3<<30 {
		t.Fatalf("Set(3GiB) = %d, %v; runtime's %d", got, err, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got, err := Set(""); err != nil || got != math.MaxInt64 {
		t.Errorf("Set(\"\") = %d, %v; want the runtime's, none", got, err)
	}
	if _, err := Set("lots"); err == nil || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("a bad value: %v, and the limit became %d", err, debug.SetMemoryLimit(-1))
	}
	if n, err := Set("50%"); err != nil || n <= Min {
		t.Errorf("Set(50%%) on this machine = %d, %v", n, err)
	}
}

func TestAvailableReadsTheCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cg := write("cgroup", "0::/system.slice/teapot-lb.service\n")
	write("fs/system.slice/teapot-lb.service/memory.max", "2147483648\n")
	if n, ok := cgroupMax(cg, filepath.Join(dir, "fs")); !ok || n != 2<<30 {
		t.Errorf("cgroupMax = %d, %v; want 2 GiB", n, ok)
	}
	write("fs/system.slice/teapot-lb.service/memory.max", "max\n")
	if n, ok := cgroupMax(cg, filepath.Join(dir, "fs")); ok {
		t.Errorf("memory.max \"max\" read as %d", n)
	}
	if _, ok := cgroupMax(write("cgroup1", "1:memory:/x\n"), filepath.Join(dir, "fs")); ok {
		t.Error("a cgroup v1 line read as a limit")
	}
	mi := write("meminfo", "MemTotal:       16314036 kB\nMemFree:  1 kB\n")
	if n, err := memTotal(mi); err != nil || n != 16314036<<10 {
		t.Errorf("memTotal = %d, %v", n, err)
	}
	if n, err := Available(); err != nil || n < Min {
		t.Errorf("Available on this machine = %d, %v", n, err)
	}
}
