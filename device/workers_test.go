package device

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"golang.org/x/sys/unix"
)

// twoDevices returns devices of n workers each, worker i of one joined to
// worker i of the other by a memlink pair.
func twoDevices(t *testing.T, n int) (*Device, *Device) {
	t.Helper()
	var la, lb []link.Link
	for range n {
		x, y := memlink.NewPair(memlink.Config{Backpressure: true})
		la, lb = append(la, x), append(lb, y)
	}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	mk := func(l []link.Link, mac, peer [6]byte, ip, peerIP netip.Addr) *Device {
		return NewWorkers(l, Options{Name: "x", MAC: mac, GIDs: []netip.Addr{netip.AddrFrom16(ip.As16())}, MTU: 1500,
			Resolve: func(context.Context, netip.Addr) (netip.Addr, [6]byte, error) { return ip, peer, nil }})
	}
	a, b := mk(la, macA, macB, ipA, ipB), mk(lb, macB, macA, ipB, ipA)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestWorkersPlacement: queue pairs go to the worker asked for, a worker
// that does not exist is an error, and a connection whose ends sit on
// different workers works, through handoffs, when every worker is
// driven from one goroutine (Progress).
func TestWorkersPlacement(t *testing.T) {
	a, b := twoDevices(t, 3)
	if a.Workers() != 3 {
		t.Fatalf("%d workers", a.Workers())
	}
	cq := verbs.NewCQ(64)
	cfg := QPConfig{SendCQ: cq, RecvCQ: cq, RQ: verbs.NewRecvQueue(4), Worker: 3}
	if _, err := a.NewRC(cfg, 0); err == nil {
		t.Fatal("a queue pair on worker 3 of 3 was created")
	}
	cfg.Worker = 2
	qa, err := a.NewRC(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Worker = 1
	qb, err := b.NewRC(cfg, mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if a.WorkerOf(qa.QPN()) != 2 || b.WorkerOf(qb.QPN()) != 1 {
		t.Fatalf("owners %d, %d", a.WorkerOf(qa.QPN()), b.WorkerOf(qb.QPN()))
	}
	ctx := context.Background()
	ga, _ := a.GID(netip.Addr{})
	gb, _ := b.GID(netip.Addr{})
	if err := a.ConnectRC(ctx, qa, 1, Remote{QPN: qb.QPN(), PSN: 2, GID: gb}, ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.ConnectRC(ctx, qb, 2, Remote{QPN: qa.QPN(), PSN: 1, GID: ga}, ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	src, _ := a.MRs().Register([]byte("handed over"), mr.LocalWrite)
	dst, _ := b.MRs().Register(make([]byte, 11), mr.LocalWrite|mr.RemoteWrite)
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: []mr.SGE{{Addr: src.Addr(), Length: 11, LKey: src.LKey()}}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	cs := make([]verbs.Completion, 1)
	for deadline := time.Now().Add(5 * time.Second); cq.Poll(cs) == 0; {
		if _, err := a.Progress(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Progress(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never completed")
		}
	}
	if cs[0].Status != verbs.Success || string(dst.Bytes()) != "handed over" {
		t.Fatalf("%+v, %q", cs[0], dst.Bytes())
	}
	// A sends on worker 2's link, so B receives on its worker 2 and hands
	// over to worker 1; B's ACK comes back on link 1 to A's worker 1.
	if st := b.WorkerStats(); st[2].HandedOff == 0 || st[1].HandedIn == 0 {
		t.Fatalf("B's workers: %+v", st)
	}
	if st := a.WorkerStats(); st[1].HandedOff == 0 || st[2].HandedIn == 0 {
		t.Fatalf("A's workers: %+v", st)
	}
	if tot := b.Stats(); tot.HandedIn != b.WorkerStats()[1].HandedIn {
		t.Fatalf("total %+v", tot)
	}
	a.Destroy(qa)
	if a.WorkerOf(qa.QPN()) != -1 {
		t.Fatal("destroyed queue pair still owned")
	}
}

// pipeLink is a link and a pollable whose socket is a pipe's read end,
// to test the waits without AF_XDP: readable when the test writes to w;
// ready makes PrepareWait report frames waiting, short shortens its
// timeout (if not 0).
type pipeLink struct {
	r, w  int
	ready bool
	short time.Duration
}

func newPipeLink(t *testing.T) *pipeLink {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(p[0]); _ = unix.Close(p[1]) })
	return &pipeLink{r: p[0], w: p[1]}
}

func (l *pipeLink) Send(f [][]byte) (int, error)      { return len(f), nil }
func (l *pipeLink) Recv([][]byte, []int) (int, error) { return 0, nil }
func (l *pipeLink) MaxFrame() int                     { return 1500 }
func (l *pipeLink) FD() int                           { return l.r }
func (l *pipeLink) PrepareWait(t time.Duration) (bool, time.Duration) {
	if l.short != 0 {
		t = min(t, l.short)
	}
	return l.ready, t
}

func TestSleeper(t *testing.T) {
	l := newPipeLink(t)
	s, err := newSleeper([]pollable{l})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	// The timeout is kept to well under a millisecond (ppoll, not poll).
	start := time.Now()
	if err := s.Sleep(300 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Microsecond || d > 50*time.Millisecond {
		t.Errorf("a 300 µs sleep took %v", d)
	}
	// Wake from another goroutine ends a long sleep.
	go func() { time.Sleep(20 * time.Millisecond); s.Wake() }()
	start = time.Now()
	if err := s.Sleep(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("woken after %v", d)
	}
	// The wake was consumed: the next sleep lasts its timeout.
	start = time.Now()
	_ = s.Sleep(20 * time.Millisecond)
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Fatalf("a stale wake-up ended the next sleep after %v", d)
	}
	// Readable link data ends a sleep too.
	go func() { time.Sleep(20 * time.Millisecond); _, _ = unix.Write(l.w, []byte{1}) }()
	start = time.Now()
	_ = s.Sleep(5 * time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("data on the link woke it after %v", d)
	}
}

// TestRunWorkersStops: RunWorkers returns the first hook error and stops
// every worker, including those asleep.
func TestRunWorkersStops(t *testing.T) {
	a, _ := twoDevices(t, 4)
	boom := errors.New("boom")
	hooks := make([]func() (bool, error), 4)
	start := time.Now()
	hooks[3] = func() (bool, error) {
		if time.Since(start) > 50*time.Millisecond {
			return false, boom
		}
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.RunWorkers(ctx, hooks); !errors.Is(err, boom) {
		t.Fatalf("RunWorkers: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("stopping took %v", d)
	}
}
