package scenarios

import (
	"flag"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// prebuildShEnv names, when .ci/run runs scenarios/prebuild.sh beside
// make test, the file it makes once prebuild.sh ended.
const prebuildShEnv = "TEAPOT_PREBUILD_SH"

// testsDone is closed when the package's tests have ended.
var testsDone = make(chan struct{})

// waitPrebuildSh waits until the file $TEAPOT_PREBUILD_SH names exists
// (at once when it is unset); false when the tests ended first.
func waitPrebuildSh() bool {
	done := os.Getenv(prebuildShEnv)
	for done != "" {
		if _, err := os.Stat(done); err == nil {
			return true
		}
		select {
		case <-testsDone:
			return false
		case <-time.After(2 * time.Second):
		}
	}
	return true
}

// prebuilt is closed when startPrebuilds' builds are done (at once when
// it starts none).
var prebuilt = make(chan struct{})

// startPrebuilds runs in TestMain before the tests. When the run is the
// whole package as make test runs it (no -run, no -short, both phases),
// it builds from the start the LB hosts' binaries the scenarios run
// (without and with the race detector), and then, in the background at a
// low CPU priority (nice 10, as the debs were built), what the parallel
// scenarios would build once they start: the Kubernetes labs' images
// (kubeImagesOnce), the host debs (buildHostDebs), make package's
// packages and make image's images (madePackages, madeImages). The scenarios that
// run alone come first and leave the CPUs 30–50 % idle for minutes
// (README, Test time), which the builds then take, while the parallel
// scenarios keep both CPUs busy: built there, the images and the debs
// held the Kubernetes lab and the systemd host about 90 s each. A
// scenario that needs one of them before it is done waits for it, as it
// did for its own build.
func startPrebuilds() {
	if testing.Short() || scenarioPhase != "" || flag.Lookup("test.run").Value.String() != "" {
		close(prebuilt)
		return
	}
	go func() {
		defer close(prebuilt)
		// The LB hosts' binary at the tests' own priority: the first
		// scenario waits for it.
		if _, err := binary.plain.get(false); err != nil {
			return
		}
		// The race detector's build of it too, which the scenarios that
		// call raceHosts run (the third scenario of the package does):
		// built here while the first two run, not while it waits.
		if raceEnabled && os.Getenv(raceHostsEnv) != "0" {
			if _, err := binary.race.get(true); err != nil {
				return
			}
		}
		// A thread's nice value is its own, and what it forks inherits
		// it: this goroutine keeps its thread, which ends with it.
		runtime.LockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 10)
		_, _ = kubeImagesOnce()
		buildHostDebs()
		// make package and make image cross-build for arm64, which
		// scenarios/prebuild.sh compiles into the build cache beside a
		// .ci/run: two builds of the same packages at once compile each
		// twice, so under it they wait for its end.
		if !waitPrebuildSh() {
			return
		}
		if tools("lintian", "rpm", "dpkg-deb", "systemd-analyze", "make") {
			_, _, _ = madePackages.make("package", "VERSION="+hostPackagesVersion)
		}
		if os.Geteuid() == 0 && tools("containerd", "ctr", "runc", "make") {
			for i := range madeImages {
				_, _, _ = madeImages[i].make("image", "VERSION="+imageTestVersion)
			}
		}
	}()
}

// tools reports whether every one of names is on the PATH.
func tools(names ...string) bool {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return false
		}
	}
	return true
}
