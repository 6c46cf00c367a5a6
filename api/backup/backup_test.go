package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

func sample() *pb.Backup {
	return &pb.Backup{
		ClusterId: "c1", CaCertPem: []byte("cert"), CaKeyPem: []byte("key"), NodeId: "n2",
		State: &pb.State{Revision: 7, Tenants: []*pb.Tenant{{Name: "acme", RevokedCredentials: []string{"ab"}}}},
	}
}

// testScryptN is the scrypt cost of the other tests: the default costs
// about 100 ms and 32 MiB per key on a quiet machine, and seconds on a
// loaded one.
const testScryptN = 1 << 10

func init() { scryptN = testScryptN }

// TestRoundTripPlainAndSealed seals at the cost of a real backup.
func TestRoundTripPlainAndSealed(t *testing.T) {
	scryptN = defaultScryptN
	t.Cleanup(func() { scryptN = testScryptN })
	for _, pass := range []string{"", "correct horse"} {
		file, err := Encode(sample(), []byte(pass))
		if err != nil {
			t.Fatal(err)
		}
		if pass != "" && strings.Contains(string(file), "acme") {
			t.Fatal("a sealed backup shows its contents")
		}
		got, err := Decode(file, []byte(pass))
		if err != nil {
			t.Fatalf("passphrase %q: %v", pass, err)
		}
		if !proto.Equal(got, sample()) {
			t.Fatalf("passphrase %q: round trip gave %v", pass, got)
		}
	}
}

func TestSealedRefusesWrongOrMissingPassphraseAndTampering(t *testing.T) {
	file, err := Encode(sample(), []byte("right"))
	if err != nil {
		t.Fatal(err)
	}
	for name, pass := range map[string]string{"missing": "", "wrong": "wrong"} {
		if _, err := Decode(file, []byte(pass)); !errors.Is(err, ErrPassphrase) {
			t.Errorf("%s passphrase: %v", name, err)
		}
	}
	bad := append([]byte{}, file...)
	bad[len(bad)-1] ^= 1
	if _, err := Decode(bad, []byte("right")); !errors.Is(err, ErrPassphrase) {
		t.Errorf("tampered file: %v", err)
	}
	if _, err := Decode([]byte("hello"), nil); err == nil || !strings.Contains(err.Error(), "not a teapot-lb backup") {
		t.Errorf("garbage: %v", err)
	}
	if _, err := EncodeRaw([]byte("junk that is not a backup"), nil); err == nil {
		t.Error("EncodeRaw accepted junk")
	}
	plain, _ := Encode(&pb.Backup{ClusterId: "c1"}, nil)
	if _, err := Decode(plain, nil); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("backup without state or CA: %v", err)
	}
}

func TestWriteFileIs0600AndReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.bak")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, _ := Encode(sample(), nil)
	if err := WriteFile(path, file); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := ReadFile(path, nil)
	if err != nil || got.GetState().GetRevision() != 7 {
		t.Fatalf("read back: %v %v", got, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestReadPassphrase(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pass")
	os.WriteFile(p, []byte("s3cret\r\nsecond line\n"), 0o600)
	got, err := ReadPassphrase(p)
	if err != nil || string(got) != "s3cret" {
		t.Fatalf("%q %v", got, err)
	}
	os.WriteFile(p, []byte("\n"), 0o600)
	if _, err := ReadPassphrase(p); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty passphrase: %v", err)
	}
}

// serve's --restore flags: nothing to read without them, the passphrase
// asked for by flag name when a sealed backup comes without one, and the
// backup itself when both are right.
func TestReadRestore(t *testing.T) {
	dir := t.TempDir()
	if b, err := ReadRestore("", ""); b != nil || err != nil {
		t.Fatalf("no --restore: %v %v", b, err)
	}
	if _, err := ReadRestore("", filepath.Join(dir, "pass")); err == nil || !strings.Contains(err.Error(), "needs --restore") {
		t.Fatalf("a passphrase without --restore: %v", err)
	}
	sealed, err := Encode(sample(), []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	file, pass := filepath.Join(dir, "backup"), filepath.Join(dir, "pass")
	if err := WriteFile(file, sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRestore(file, ""); err == nil || !strings.Contains(err.Error(), "--restore-passphrase-file") {
		t.Fatalf("a sealed backup without a passphrase: %v", err)
	}
	if _, err := ReadRestore(file, filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--restore-passphrase-file:") {
		t.Fatalf("a missing passphrase file: %v", err)
	}
	if _, err := ReadRestore(filepath.Join(dir, "missing"), ""); err == nil || !strings.HasPrefix(err.Error(), "--restore:") {
		t.Fatalf("a missing backup: %v", err)
	}
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := ReadRestore(file, pass)
	if err != nil || !proto.Equal(b, sample()) {
		t.Fatalf("read %v, %v", b, err)
	}
}
