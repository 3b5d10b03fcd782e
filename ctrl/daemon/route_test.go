package daemon

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// twoWorkers is the placement fixture with a second worker, the rings
// between the two, and where each queue pair's packets arrive.
func twoWorkers(t *testing.T) (*placeFixture, *worker, *worker) {
	f := newPlaceFixture(t)
	d := f.w.d
	d.rx = make([]atomic.Uint64, len(d.owner))
	w1 := &worker{d: d, q: 1, exp: map[uint32]*qpExpect{}, epoch: f.w.epoch}
	d.workers = []*worker{f.w, w1}
	connectHands(d.workers)
	return f, f.w, w1
}

// arrive has w deliver frame's packet as far as recording where it
// arrived.
func arrive(t *testing.T, w *worker, frame []byte) {
	t.Helper()
	var p wire.Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	w.arrived(p.BTH().DestQP(), &p)
}

// placeOn offers frame to worker w for the fixture's application.
func (f *placeFixture) placeOn(t *testing.T, w *worker, frame []byte) bool {
	t.Helper()
	var p wire.Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	return w.place(f.a, f.ring.DaemonEnd(), &p, frame)
}

// TestRouteExpectations: an expectation reaches the worker where its
// queue pair's packets arrive: every worker while none has arrived, then
// only the one they arrive at; that worker places the responses.
func TestRouteExpectations(t *testing.T) {
	f, w0, w1 := twoWorkers(t)
	peer := f.peer.Fields().Src.As16()
	now := int64(time.Since(w0.epoch))
	x := shmlink.Expectation{QPN: 0x42, PSN: 100, Packets: 2, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 512}

	// None arrived yet: here, and handed to the other worker.
	if !w0.expect(f.a, &x, now) || w0.nexp != 1 || w1.nexp != 0 {
		t.Fatalf("taken: here %d, there %d", w0.nexp, w1.nexp)
	}
	w1.takeHanded()
	if w1.nexp != 1 || w0.c.handed.Load() != 1 {
		t.Fatalf("handed %d, there %d", w0.c.handed.Load(), w1.nexp)
	}
	// The responses arrive at worker 1, which places them.
	first := rcFrame(&f.peer, wire.RCReadResponseFirst, 0x42, 100, pattern(256, 1))
	arrive(t, w1, first)
	if !f.placeOn(t, w1, first) {
		t.Fatal("the first response was not placed where it arrived")
	}
	last := rcFrame(&f.peer, wire.RCReadResponseLast, 0x42, 101, pattern(256, 2))
	arrive(t, w1, last)
	if !f.placeOn(t, w1, last) || w1.nexp != 0 {
		t.Fatalf("the last response: %d live", w1.nexp)
	}

	// The next read goes to worker 1 alone.
	y := x
	y.PSN = 102
	if !w0.expect(f.a, &y, now) || w0.nexp != 1 {
		t.Fatal("refused") // w0 still holds its copy of x
	}
	w1.takeHanded()
	if w1.nexp != 1 || w0.c.handed.Load() != 2 {
		t.Fatalf("handed %d, there %d", w0.c.handed.Load(), w1.nexp)
	}

	// Neither recording arrivals nor handing over allocates.
	var p wire.Packet
	if err := p.Parse(last); err != nil {
		t.Fatal(err)
	}
	var h handed
	if n := testing.AllocsPerRun(100, func() { w1.arrived(0x42, &p); w0.handTo(w1, f.a, &y); w1.hands[0].pop(&h) }); n != 0 {
		t.Errorf("%v allocations per packet and hand-over", n)
	}

	// The flow moves to worker 0: it forgets what it held for the queue
	// pair (made while the packets went elsewhere) before placing.
	third := rcFrame(&f.peer, wire.RCReadResponseFirst, 0x42, 100, pattern(256, 3))
	arrive(t, w0, third)
	if w0.nexp != 0 || f.placeOn(t, w0, third) {
		t.Fatalf("worker 0 kept %d expectations after the flow moved to it", w0.nexp)
	}
}

// TestRouteLate: a handed expectation whose responses already passed the
// receiving worker (some at or after its first PSN) is not taken there;
// one whose queue pair changed hands is dropped; a full ring refuses.
func TestRouteLate(t *testing.T) {
	f, w0, w1 := twoWorkers(t)
	peer := f.peer.Fields().Src.As16()
	now := int64(time.Since(w0.epoch))
	arrive(t, w1, rcFrame(&f.peer, wire.RCReadResponseOnly, 0x42, 0xfffffe, pattern(64, 1)))
	// A duplicate of an older response, late: the furthest stays.
	arrive(t, w1, rcFrame(&f.peer, wire.RCReadResponseOnly, 0x42, 0xfffff0, pattern(64, 1)))
	for _, c := range []struct {
		psn  uint32
		take bool
	}{{0xffffff, true}, {0xfffffe, false}, {0xfffff0, false}, {1, true}} {
		x := shmlink.Expectation{QPN: 0x42, PSN: c.psn, Packets: 1, MTU: 256, Peer: peer, Region: 5, Len: 64}
		if !w0.expect(f.a, &x, now) || w0.nexp != 0 {
			t.Fatalf("psn %#x: not handed", c.psn)
		}
		late := w1.c.handLate.Load()
		w1.takeHanded()
		if took := w1.nexp == 1; took != c.take {
			t.Errorf("psn %#x: taken %v, want %v", c.psn, took, c.take)
		}
		if took := w1.c.handLate.Load() == late; took != c.take {
			t.Errorf("psn %#x: late not counted", c.psn)
		}
		w1.dropExpect(0x42)
	}

	x := shmlink.Expectation{QPN: 0x42, PSN: 5, Packets: 1, MTU: 256, Peer: peer, Region: 5, Len: 64}
	w0.expect(f.a, &x, now)
	f.w.d.owner[0x42].Store(f.other)
	w1.takeHanded()
	f.w.d.owner[0x42].Store(f.a)
	if w1.nexp != 0 {
		t.Fatal("an expectation taken for a queue pair its application gave up")
	}

	for i := range len(handRing{}.m) {
		if !w0.expect(f.a, &x, now) {
			t.Fatalf("expectation %d refused", i)
		}
	}
	if w0.expect(f.a, &x, now) || w0.c.handFull.Load() != 1 {
		t.Fatal("a full ring took an expectation")
	}
	w1.takeHanded()
	var h handed
	if w1.nexp != 1 || w1.hands[0].pop(&h) {
		t.Fatalf("%d live after taking a full ring", w1.nexp)
	}
}
