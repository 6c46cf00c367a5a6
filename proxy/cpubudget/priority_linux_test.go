package cpubudget

import (
	"crypto"
	"crypto/rand"
	"io"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// niceSigner records the niceness of the thread its signature runs on.
type niceSigner struct {
	crypto.Signer
	nice *int
}

func (s niceSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	*s.nice = threadNice()
	return []byte("sig"), nil
}

// threadNice is the calling thread's niceness (the raw getpriority
// value is 20 - nice).
func threadNice() int {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		return -100
	}
	return 20 - p
}

// A health check's signature (ClientSigner) runs on a thread of a low
// priority, so that on a busy host it takes only the CPU the
// host's other work leaves; a handshake's (Signer), which a client waits
// for, keeps the host's priority, and so does the caller's thread after.
func TestCheckSignaturesRunAtALowPriority(t *testing.T) {
	t.Parallel()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadNice()
	if before == checkNice {
		t.Skipf("the test runs at niceness %d already", before)
	}
	b := New(Options{})
	var check, handshake int
	if _, err := b.Tenant("b").ClientSigner(niceSigner{Signer: key(t), nice: &check}).Sign(rand.Reader, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Tenant("b").Signer(niceSigner{Signer: key(t), nice: &handshake}).Sign(rand.Reader, nil, nil); err != nil {
		t.Fatal(err)
	}
	if check != checkNice {
		t.Errorf("a check's signature ran at niceness %d, want %d", check, checkNice)
	}
	if handshake != before {
		t.Errorf("a handshake's signature ran at niceness %d, want the host's %d", handshake, before)
	}
	if now := threadNice(); now != before {
		t.Errorf("the caller's thread is at niceness %d after a check's signature, was %d", now, before)
	}
	if st := b.Tenant("b").Stat(); st.Signed != 2 {
		t.Errorf("b's account %+v, want 2 signatures", st)
	}
}
