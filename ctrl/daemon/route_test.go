package daemon

import (
	"bytes"
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
	return placeOnRing(w, f.a, f.ring.DaemonEnd(), &p, frame)
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
	if n := testing.AllocsPerRun(100, func() { w1.arrived(0x42, &p); w0.handTo(w1, f.a, &y, 0); w1.hands[0].pop(&h) }); n != 0 {
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

// TestPlaceRequests: the rest of a WRITE or SEND, announced after its
// first packets, starts after the furthest request the worker delivered
// (those passed whole); its packets are placed in order, each once, and
// the next packet that cannot be placed ends it. Requests and READ
// responses, in PSN spaces of their own, never match each other's
// expectations.
func TestPlaceRequests(t *testing.T) {
	f := newPlaceFixture(t)
	w := f.w
	peer := f.peer.Fields().Src.As16()
	now := int64(time.Since(w.epoch))
	// The first packet and two more passed whole before the announcement
	// (a late duplicate of the first does not move that back).
	for _, ps := range []uint32{20, 21, 22, 20} {
		op := wire.RCWriteMiddle
		if ps == 20 {
			op = wire.RCWriteFirst
		}
		arrive(t, w, rcFrame(&f.peer, op, 0x42, ps, pattern(256, 9)))
	}
	// The transport saw the first packet only: the rest from PSN 21.
	x := shmlink.Expectation{QPN: 0x42, PSN: 21, Packets: 5, MTU: 256, Peer: peer, Region: 5, Offset: 1000, Len: 5*256 - 56, Requests: true}
	if !w.expect(f.a, &x, now) || w.nexp != 1 {
		t.Fatal("refused")
	}
	if e := w.exp[0x42].e[0]; e.psn != 23 || e.base != 1512 || e.size != 3*256-56 || e.packets != 3 || !e.req {
		t.Fatalf("expectation %+v, want it from PSN 23", e)
	}
	// A READ response with the PSN is not for it.
	if f.try(t, f.a, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 23, pattern(256, 1))) || w.nexp != 1 {
		t.Fatal("a read response placed in a write")
	}
	p23, p24, p25 := pattern(256, 3), pattern(256, 4), pattern(200, 5)
	for _, c := range []struct {
		op    wire.Opcode
		psn   uint32
		data  []byte
		place bool
	}{
		{wire.RCWriteMiddle, 22, pattern(256, 2), false}, // passed already
		{wire.RCWriteMiddle, 23, p23, true},
		{wire.RCWriteMiddle, 23, p23, false}, // once
		{wire.RCWriteMiddle, 24, p24, true},
		{wire.RCWriteLast, 25, p25, true},
		{wire.RCWriteLast, 25, p25, false}, // the expectation ended
	} {
		frame := rcFrame(&f.peer, c.op, 0x42, c.psn, c.data)
		arrive(t, w, frame) // as deliver does, before placing
		if got := f.try(t, f.a, frame); got != c.place {
			t.Errorf("%v psn %d: placed %v, want %v", c.op, c.psn, got, c.place)
		}
	}
	if !bytes.Equal(f.mem[1512:1512+712], append(append(append([]byte{}, p23...), p24...), p25...)) {
		t.Error("the region does not hold the write's rest")
	}
	if w.nexp != 0 {
		t.Fatalf("%d live after the last packet", w.nexp)
	}

	// Announced after everything passed: nothing left, refused.
	y := shmlink.Expectation{QPN: 0x42, PSN: 24, Packets: 2, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 512, Requests: true}
	if w.expect(f.a, &y, now) || w.nexp != 0 {
		t.Fatal("an expectation taken behind its last packet")
	}

	// The next packet, unplaceable, ends the expectation: a new message's
	// first packet, a write's last with immediate data (it may be
	// answered RNR), a bad ICRC, a short middle.
	bad := func() []byte {
		b := rcFrame(&f.peer, wire.RCSendMiddle, 0x42, 30, pattern(256, 1))
		b[len(b)-1] ^= 1
		return b
	}()
	for name, frame := range map[string][]byte{
		"first":      rcFrame(&f.peer, wire.RCWriteFirst, 0x42, 30, pattern(256, 1)),
		"last imm":   rcFrame(&f.peer, wire.RCWriteLastImm, 0x42, 30, pattern(64, 1)),
		"bad icrc":   bad,
		"short":      rcFrame(&f.peer, wire.RCSendMiddle, 0x42, 30, pattern(255, 1)),
		"read":       rcFrame(&f.peer, wire.RCReadRequest, 0x42, 30, nil),
		"other peer": rcFrame(&f.stray, wire.RCSendMiddle, 0x42, 30, pattern(256, 1)),
	} {
		f.w.d.rx[0x42].Store(0)
		z := shmlink.Expectation{QPN: 0x42, PSN: 30, Packets: 2, MTU: 256, Peer: peer, Region: 5, Offset: 4096, Len: 512, Requests: true}
		if !w.expect(f.a, &z, now) {
			t.Fatalf("%s: refused", name)
		}
		if f.try(t, f.a, frame) || w.nexp != 0 {
			t.Errorf("%s: placed, or the expectation lives on (%d)", name, w.nexp)
		}
		w.dropExpect(0x42)
		if f.try(t, f.a, rcFrame(&f.peer, wire.RCSendLast, 0x42, 30, pattern(100, 1))) {
			t.Errorf("%s: placed after the expectation ended", name)
		}
	}
}

// TestPlaceRequestsBounded: a send's expectation runs to the end of its
// receive buffer, past its message; when the message ended in what passed
// before it was taken, the rest could be another message's, so it is not
// taken. An expectation made before the queue pair connected again (a
// new PSN space) places nothing.
func TestPlaceRequestsBounded(t *testing.T) {
	f := newPlaceFixture(t)
	w, d := f.w, f.w.d
	peer := f.peer.Fields().Src.As16()
	now := int64(time.Since(w.epoch))
	// A three-packet send (40-42), then the next send's first two
	// packets (43, 44), all passed whole before the first send's
	// expectation (announced after its first packet, to the end of a 16
	// packet buffer) is taken: trimmed to 45 it would land the second
	// send's middle in the first one's buffer.
	for ps, op := range map[uint32]wire.Opcode{40: wire.RCSendFirst, 41: wire.RCSendMiddle, 42: wire.RCSendLast, 43: wire.RCSendFirst, 44: wire.RCSendMiddle} {
		arrive(t, w, rcFrame(&f.peer, op, 0x42, ps, pattern(256, 1)))
	}
	x := shmlink.Expectation{QPN: 0x42, PSN: 41, Packets: 16, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 16 * 256, Requests: true}
	if w.expect(f.a, &x, now) || w.nexp != 0 {
		t.Fatal("taken past the end of its message")
	}
	// Before the message ended, it is trimmed and taken.
	d.restart(0x42)
	for ps, op := range map[uint32]wire.Opcode{40: wire.RCSendFirst, 41: wire.RCSendMiddle} {
		arrive(t, w, rcFrame(&f.peer, op, 0x42, ps, pattern(256, 1)))
	}
	x = shmlink.Expectation{QPN: 0x42, PSN: 41, Packets: 16, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 16 * 256, Requests: true}
	if !w.expect(f.a, &x, now) || w.exp[0x42].e[0].psn != 42 {
		t.Fatal("not taken from PSN 42")
	}
	// The queue pair connects again: the expectation is void.
	d.restart(0x42)
	if f.try(t, f.a, rcFrame(&f.peer, wire.RCSendLast, 0x42, 42, pattern(100, 1))) || w.nexp != 0 {
		t.Fatal("placed under an expectation of an earlier connection")
	}
}
