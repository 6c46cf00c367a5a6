package splice

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestMoveKeepsBytesAWriteDeadlineLeft: a destination that reads nothing
// makes a Move fail on its write deadline with bytes in the pipe (or in
// its copy buffer, between bursts); the next Move sends them first, and
// every byte arrives in order. The pool is back to its idle pipe
// afterwards.
func TestMoveKeepsBytesAWriteDeadlineLeft(t *testing.T) {
	t.Parallel()
	client, srcEnd := tcpPair(t)
	dstEnd, reader := tcpPair(t)
	pl := NewPool(4)
	defer pl.Close()
	sp := New(pl, dstEnd, srcEnd)
	defer sp.Close()

	msg := make([]byte, 16<<20) // more than both sockets' buffers hold
	rand.Read(msg)
	go func() {
		client.Write(msg)
		client.CloseWrite()
	}()
	dstEnd.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	first, err := sp.Move()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Move with a destination that reads nothing: %d bytes, %v; want a deadline", first, err)
	}
	// The deadline finds the bytes in a pipe, or in the buffer of a copy
	// between two bursts.
	if !sp.holding && !sp.pending {
		t.Fatal("the deadline left no bytes with the splicer; make the message larger")
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(reader)
		got <- b
	}()
	dstEnd.SetWriteDeadline(time.Time{})
	rest, err := sp.Move()
	if err != nil {
		t.Fatalf("second Move: %v", err)
	}
	dstEnd.CloseWrite()
	b := <-got
	if first+rest != int64(len(msg)) || !bytes.Equal(b, msg) {
		t.Fatalf("moved %d+%d bytes, received %d of %d, equal %v", first, rest, len(b), len(msg), bytes.Equal(b, msg))
	}
	if n := pl.Open(); n != 1 {
		t.Errorf("%d pipes open after the transfer, want the one idle", n)
	}
}

// TestNilPoolCopies: without a pool a splicer copies.
func TestNilPoolCopies(t *testing.T) {
	t.Parallel()
	client, srcEnd := tcpPair(t)
	dstEnd, reader := tcpPair(t)
	sp := New(nil, dstEnd, srcEnd)
	defer sp.Close()
	go func() {
		client.Write([]byte("hello"))
		client.CloseWrite()
	}()
	if n, err := sp.Move(); n != 5 || err != nil {
		t.Fatalf("Move: %d, %v", n, err)
	}
	dstEnd.CloseWrite()
	if b, _ := io.ReadAll(reader); string(b) != "hello" {
		t.Fatalf("received %q", b)
	}
}

// TestQuantumReturnsAsBytesMove: with a quantum, Move returns ErrQuantum
// each time it moved it (a pipe's capacity more at most), splicing or
// copying, and every byte arrives in order.
func TestQuantumReturnsAsBytesMove(t *testing.T) {
	t.Parallel()
	for _, pl := range []*Pool{NewPool(4), nil} {
		client, srcEnd := tcpPair(t)
		dstEnd, reader := tcpPair(t)
		sp := New(pl, dstEnd, srcEnd)
		const quantum = 256 << 10
		sp.SetQuantum(quantum)
		msg := make([]byte, 8<<20)
		rand.Read(msg)
		go func() {
			client.Write(msg)
			client.CloseWrite()
		}()
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(reader)
			got <- b
		}()
		var total int64
		quanta := 0
		for {
			n, err := sp.Move()
			total += n
			if errors.Is(err, ErrQuantum) {
				quanta++
				if n < quantum || n > quantum+spliceChunk {
					t.Fatalf("a quantum of %d bytes, want %d to %d", n, quantum, quantum+spliceChunk)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		sp.Close()
		dstEnd.CloseWrite()
		b := <-got
		if total != int64(len(msg)) || !bytes.Equal(b, msg) || quanta < len(msg)/(quantum+spliceChunk) {
			t.Fatalf("pool %v: moved %d in %d quanta, received %d of %d, equal %v", pl != nil, total, quanta, len(b), len(msg), bytes.Equal(b, msg))
		}
		if pl != nil {
			pl.Close()
		}
	}
}

// TestSmallMessagesAreCopied: messages smaller than the copy buffer, one
// at a time, are copied and take no pipe; a burst that fills the buffer
// is spliced through one; every byte arrives in order.
func TestSmallMessagesAreCopied(t *testing.T) {
	t.Parallel()
	client, srcEnd := tcpPair(t)
	dstEnd, reader := tcpPair(t)
	pl := NewPool(4)
	defer pl.Close()
	sp := New(pl, dstEnd, srcEnd)
	defer sp.Close()
	moved := make(chan error, 1)
	go func() {
		for {
			_, err := sp.Move()
			if err == nil {
				dstEnd.CloseWrite()
			}
			if !errors.Is(err, ErrQuantum) {
				moved <- err
				return
			}
		}
	}()

	// Kept-alive exchanges: each message is read by the far end before
	// the next is sent.
	got := make([]byte, 4<<20)
	for i := range 200 {
		msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*37%(copyBufSize-1))
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		reader.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(reader, got[:len(msg)]); err != nil || !bytes.Equal(got[:len(msg)], msg) {
			t.Fatalf("message %d of %d bytes: %v, equal %v", i, len(msg), err, bytes.Equal(got[:len(msg)], msg))
		}
	}
	if n := pl.Open(); n != 0 {
		t.Fatalf("%d pipes opened for messages smaller than the copy buffer, want none", n)
	}

	// A burst.
	burst := make([]byte, 4<<20)
	rand.Read(burst)
	go func() {
		client.Write(burst)
		client.CloseWrite()
	}()
	if _, err := io.ReadFull(reader, got); err != nil || !bytes.Equal(got, burst) {
		t.Fatalf("burst: %v, equal %v", err, bytes.Equal(got, burst))
	}
	if err := <-moved; err != nil {
		t.Fatalf("Move: %v", err)
	}
	if n := pl.Open(); n != 1 {
		t.Errorf("%d pipes open after a 4 MiB burst, want the one it was spliced through, idle", n)
	}
}

// TestCopyKeepsBytesAWriteDeadlineLeft: small messages to a destination
// that reads nothing, through a splicer without pipes (it copies every
// read): the Move fails on its write deadline with bytes read and not
// written, and the next Move writes them first: every byte arrives in
// order.
func TestCopyKeepsBytesAWriteDeadlineLeft(t *testing.T) {
	t.Parallel()
	client, srcEnd := tcpPair(t)
	dstEnd, reader := tcpPair(t)
	sp := New(nil, dstEnd, srcEnd)
	defer sp.Close()
	// A Move that waits for bytes that never come fails here, not at the
	// test's timeout.
	srcEnd.SetReadDeadline(time.Now().Add(30 * time.Second))

	// 1 KiB messages, spaced, until told to stop; then the end.
	var sent []byte
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				client.CloseWrite()
				return
			default:
			}
			msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1<<10)
			if _, err := client.Write(msg); err != nil {
				return
			}
			sent = append(sent, msg...)
			time.Sleep(time.Millisecond)
		}
	}()
	dstEnd.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	first, err := sp.Move()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		close(stop)
		t.Fatalf("Move with a destination that reads nothing: %d bytes, %v; want a deadline", first, err)
	}
	if !sp.pending {
		close(stop)
		t.Fatalf("the deadline left no bytes read and not written (moved %d)", first)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(reader)
		got <- b
	}()
	dstEnd.SetWriteDeadline(time.Time{})
	time.AfterFunc(100*time.Millisecond, func() { close(stop) })
	rest, err := sp.Move()
	if err != nil {
		t.Fatalf("second Move: %v", err)
	}
	dstEnd.CloseWrite()
	b := <-got
	<-done
	if first+rest != int64(len(sent)) || !bytes.Equal(b, sent) {
		t.Fatalf("moved %d+%d bytes, received %d of %d, equal %v", first, rest, len(b), len(sent), bytes.Equal(b, sent))
	}
}

// TestSourceClosesWhileAWriteWaits: a direction whose destination reads
// nothing waits to write a copied message; closing its source meanwhile
// returns at once (the wait holds no lock of the source: a connection's
// end closes the client first, then the member), and closing the
// destination then ends the Move.
func TestSourceClosesWhileAWriteWaits(t *testing.T) {
	t.Parallel()
	client, srcEnd := tcpPair(t)
	dstEnd, _ := tcpPair(t)
	pl := NewPool(4)
	defer pl.Close()
	sp := New(pl, dstEnd, srcEnd)
	defer sp.Close()
	// Fill the destination's buffers: nothing reads them.
	chunk := bytes.Repeat([]byte("junk"), 16<<10)
	dstEnd.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		if _, err := dstEnd.Write(chunk); err != nil {
			break
		}
	}
	dstEnd.SetWriteDeadline(time.Time{})
	moved := make(chan error, 1)
	go func() {
		_, err := sp.Move()
		moved <- err
	}()
	// 1 KiB at a time, spaced, so that each read finds one message (copied,
	// not a burst), until the destination takes no more and the Move
	// waits to write one.
	msg := bytes.Repeat([]byte("m"), 1<<10)
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		client.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := client.Write(msg); err != nil {
			break
		}
	}
	closed := make(chan struct{})
	go func() {
		srcEnd.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		dstEnd.Close() // let the test end
		t.Fatal("closing the source waited for the destination's write")
	}
	dstEnd.Close()
	select {
	case err := <-moved:
		if err == nil {
			t.Fatal("Move ended without an error when both sockets closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Move did not end when the destination closed")
	}
}
