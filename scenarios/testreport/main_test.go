package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// The events of one `go test -json` run (testdata/events.json) over five
// packages: a passes two tests, skips one and fails one in a subtest; b
// times out in a test; c does not build; d passes; e has no tests.
func TestReportPrintsWhatFailedAndTheSlowest(t *testing.T) {
	f, err := os.Open("testdata/events.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	r := newReport(&out)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		r.event(e)
	}
	r.summary(10, 0)
	got := out.String()
	for _, want := range []string{
		"    a_test.go:5: sub said\n",       // a failed subtest's log
		"--- FAIL: TestFails (0.00s)\n",     // and its parent's end
		"FAIL\texample.com/run/a\t",         // the failed package
		"c/c_test.go:3:32: undefined",       // the build error
		"FAIL\texample.com/run/c [build",    // the package it failed
		"ok  \texample.com/run/d\t",         // a package that passed
		"?   \texample.com/run/e\t[no test", // a package without tests
		"    b_test.go:3: before hang\n",    // a test cut by the timeout
		"panic: test timed out after 2s",    // and the timeout
		"FAIL\texample.com/run/b\t",
		"0.4s  example.com/run/a TestSlow\n",
		"TestFails  FAILED\n",
		"2.0s  example.com/run/b\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report has no %q:\n%s", want, got)
		}
	}
	for _, hidden := range []string{"quiet log", "hidden", "skipped", "=== RUN   TestQuick", "TestSkip"} {
		if strings.Contains(got, hidden) {
			t.Errorf("the report shows %q, of a test that passed or was skipped:\n%s", hidden, got)
		}
	}
	if !r.failed {
		t.Error("the report did not see the failures")
	}
}

// A run where everything passes is not a failure.
func TestReportPassing(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	for _, e := range []event{
		{Action: "run", Package: "p", Test: "TestA"},
		{Action: "output", Package: "p", Test: "TestA", Output: "=== RUN   TestA\n"},
		{Action: "pass", Package: "p", Test: "TestA", Elapsed: 1.5},
		{Action: "output", Package: "p", Output: "ok  \tp\t1.6s\n"},
		{Action: "pass", Package: "p", Elapsed: 1.6},
	} {
		r.event(e)
	}
	if r.failed {
		t.Error("a passing run was taken as failed")
	}
	if got := out.String(); got != "ok  \tp\t1.6s\n" {
		t.Errorf("printed %q, want only the package's line", got)
	}
}

// A test's time counts from its last resume, or from the mark it logs.
func TestReportCountsFromTheMark(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(seconds(s)) }
	for _, e := range []event{
		{Action: "run", Package: "p", Test: "TestP", Time: at(0)},
		{Action: "pause", Package: "p", Test: "TestP", Time: at(0)},
		{Action: "cont", Package: "p", Test: "TestP", Time: at(100)},
		{Action: "output", Package: "p", Test: "TestP", Output: "    parallel_test.go:60: " + RunningMark + "\n", Time: at(400)},
		{Action: "pass", Package: "p", Test: "TestP", Elapsed: 430, Time: at(430)},
		{Action: "run", Package: "p", Test: "TestQ", Time: at(430)},
		{Action: "pass", Package: "p", Test: "TestQ", Elapsed: 12, Time: at(442)},
	} {
		r.event(e)
	}
	r.summary(5, 0)
	for _, want := range []string{"    30.0s  p TestP\n", "    12.0s  p TestQ\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report has no %q:\n%s", want, out.String())
		}
	}
}
