package wal

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// The pace follows the transaction rate over a second: none up to
// PaceAbove (a burst after a stall included), the whole Pace from twice
// that rate, less when the bytes it would let pile up exceed paceBytes,
// none again once the stream stops.
func TestPacerFollowsTransactionRate(t *testing.T) {
	p := newPacer(10*time.Millisecond, 1000)
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	feed := func(from, to, perMs float64) {
		for ms := from; ms < to; ms += 1 / perMs {
			p.commit(at(ms), at(ms))
		}
	}
	feed(0, 2500, 0.5) // 500/s
	if got := p.pace(at(2500)); got != 0 {
		t.Errorf("pace at 500 transactions/s = %s, want 0", got)
	}
	// A burst of 300 after a stall, inside a second of 500/s: not a heavy
	// stream.
	feed(2500, 2550, 6)
	feed(2550, 3600, 0.5)
	if got := p.pace(at(3600)); got != 0 {
		t.Errorf("pace after a burst in a second at 800 transactions/s = %s, want 0", got)
	}
	feed(3600, 6000, 1.5) // 1,500/s: half way up the ramp
	if got := p.pace(at(6000)); got < 4*time.Millisecond || got > 6*time.Millisecond {
		t.Errorf("pace at 1,500 transactions/s = %s, want about 5ms", got)
	}
	feed(6000, 8500, 4) // 4,000/s
	if got := p.pace(at(8500)); got != 10*time.Millisecond {
		t.Errorf("pace at 4,000 transactions/s = %s, want 10ms", got)
	}
	// The same transactions carrying 64 MB/s: a pace would let 640 kB pile
	// up in the socket; it shrinks to what keeps it under paceBytes.
	for ms := 8500.0; ms < 8750; ms += 0.25 {
		p.commit(at(ms), at(ms))
		p.read(at(ms), 16000)
	}
	if got, want := p.pace(at(8750)), time.Duration(paceBytes/64e6*float64(time.Second)); got < want*9/10 || got > want*11/10 {
		t.Errorf("pace at 64 MB/s = %s, want about %s", got, want)
	}
	if got := p.pace(at(11000)); got != 0 {
		t.Errorf("pace after 2s of silence = %s, want 0", got)
	}
	if got := newPacer(0, 1000).pace(at(0)); got != 0 {
		t.Errorf("pace with Pace 0 = %s, want 0", got)
	}
}

// A backlog (transactions read long after their commit) is paced whatever
// its transaction rate, still under paceBytes; a transaction read as it
// commits ends that.
func TestPacerPacesABacklog(t *testing.T) {
	p := newPacer(10*time.Millisecond, 1000)
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	committed := t0.Add(-time.Minute)
	for ms := 0.0; ms < 500; ms += 5 { // 200 transactions/s, 1 MB/s
		p.commit(at(ms), committed)
		p.read(at(ms), 5000)
	}
	if got := p.pace(at(500)); got != 10*time.Millisecond {
		t.Errorf("pace of a backlog read at 1 MB/s = %s, want 10ms", got)
	}
	for ms := 500.0; ms < 1000; ms += 0.5 { // 20 MB/s in 100 transactions/s
		if int(ms*2)%20 == 0 {
			p.commit(at(ms), committed)
		}
		p.read(at(ms), 10000)
	}
	if got, want := p.pace(at(1000)), time.Duration(paceBytes/20e6*float64(time.Second)); got < want*9/10 || got > want*11/10 {
		t.Errorf("pace of a backlog read at 20 MB/s = %s, want about %s", got, want)
	}
	p.commit(at(1000), at(999))
	if got := p.pace(at(1000)); got != 0 {
		t.Errorf("pace after a transaction read 1ms after its commit = %s, want 0", got)
	}
}

// The stream gives its pacer each transaction's commit time: one read well
// after its commit makes the stream a backlog's. (The opposite, a live
// transaction, is left to TestPacerPacesABacklog: on a loaded server the
// walsender may be seconds behind.)
func TestStreamTellsThePacerOfABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, "o1", "committed-before-the-stream")
	time.Sleep(catchingUp + 200*time.Millisecond)
	cfg := b.config()
	cfg.Pace, cfg.PaceAbove = time.Millisecond, 1_000_000 // paced only as a backlog
	s := b.open(t, cfg)
	next(t, s)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !s.pace.late { // read after Close: the stream's goroutine has ended
		t.Fatal("a transaction read over a second after its commit did not make the pacer pace a backlog")
	}
}

// fixedPace paces every read by d.
type fixedPace time.Duration

func (f fixedPace) pace(time.Time) time.Duration { return time.Duration(f) }
func (fixedPace) read(time.Time, int)            {}

// A read that follows one that emptied the socket waits for the pace; a
// read that follows one that filled the buffer, or the first read, does
// not.
func TestPacedConnWaitsOnlyAfterEmptyingTheSocket(t *testing.T) {
	const pace = 600 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	server := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(server)
			return
		}
		server <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	srv, ok := <-server
	if !ok {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	c := &pacedConn{Conn: raw, p: fixedPace(pace)}

	read := func(n int) (got int, took time.Duration) {
		t.Helper()
		buf := make([]byte, n)
		start := time.Now()
		got, err := io.ReadAtLeast(c, buf, 1)
		if err != nil {
			t.Fatal(err)
		}
		return got, time.Since(start)
	}
	write := func(s string) {
		t.Helper()
		if _, err := srv.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	write("abc")
	if _, took := read(64); took >= pace/2 {
		t.Errorf("first read took %s: it must not wait", took)
	}
	// That read emptied the socket: the next one waits for the pace, even
	// though the data is there already.
	write("de")
	time.Sleep(20 * time.Millisecond)
	if _, took := read(64); took < pace-100*time.Millisecond {
		t.Errorf("read after the socket was emptied took %s: want it paced (%s)", took, pace)
	}
	// A read that fills the buffer leaves data behind: the next goes on.
	write("0123456789")
	time.Sleep(20 * time.Millisecond)
	read(64) // paced again, and empties the socket
	write("0123456789")
	time.Sleep(pace + 50*time.Millisecond)
	if n, _ := read(4); n != 4 {
		t.Fatalf("read %d bytes, want 4", n)
	}
	if _, took := read(4); took >= pace/2 {
		t.Errorf("read after a full read took %s: it must not wait", took)
	}
}
