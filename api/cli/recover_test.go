package cli_test

import (
	"strings"
	"testing"
)

// cluster recover asks for --yes before it calls anything, then reports
// the revision and the voters forgotten.
func TestClusterRecover(t *testing.T) {
	fake := newFake()
	if r := run(t, fake, "", "cluster", "recover"); r.code == 0 || !strings.Contains(r.stderr, "--yes") || fake.recovered != 0 {
		t.Fatalf("without --yes: exit %d, stderr %q, %d calls", r.code, r.stderr, fake.recovered)
	}
	r := run(t, fake, "", "cluster", "recover", "--yes")
	if r.code != 0 || fake.recovered != 1 || r.stdout != "recovered: a one-host cluster at revision 0; forgot lb2, lb3\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q, %d calls", r.code, r.stdout, r.stderr, fake.recovered)
	}
}
