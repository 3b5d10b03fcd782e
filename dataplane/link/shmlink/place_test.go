package shmlink

import (
	"errors"
	"testing"

	"github.com/softfabric/softfabric/dataplane/link"
)

// TestExpectAndPlace: an expectation crosses the from-app ring in a slot
// of its own, ahead of the frame sent after it, naming the region and
// offset of its buffer; a frame the daemon placed crosses the to-app
// ring with its headers and full length, and Placed finds its payload in
// the application's own memory, through Recv and RecvZC.
func TestExpectAndPlace(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 512})
	a, d := r.AppEnd(), r.DaemonEnd()
	mem := make([]byte, 8192)
	a.SetMemRegions([]MemRegion{{ID: 3, Mem: make([]byte, 64)}, {ID: 7, Mem: mem}})
	x := link.Expectation{QPN: 0x1234, PSN: 0xfffffe, Packets: 3, MTU: 256, Peer: [16]byte{15: 9}, PeerQPN: 77, Buf: mem[1000:1700], Responses: true}
	a.Expect(&x)
	if n, err := a.Send([][]byte{frame(1, 512)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	// Outside every region, or past one's end: not announced.
	a.Expect(&link.Expectation{QPN: 1, Packets: 1, MTU: 256, Buf: make([]byte, 10), Responses: true})
	// The rest of a write or send: announced as requests.
	a.Expect(&link.Expectation{QPN: 1, Packets: 1, MTU: 256, Buf: mem[2000:2100]})
	a.Expect(&link.Expectation{QPN: 1, Packets: 1, MTU: 256, Buf: mem[8000:8100], Responses: true})
	views := make([][]byte, 8)
	if n := d.RecvZC(views); n != 4 {
		t.Fatalf("daemon got %d slots, want 4", n)
	}
	got, ok := d.Expectation(0)
	want := Expectation{QPN: 0x1234, PSN: 0xfffffe, Packets: 3, MTU: 256, Peer: x.Peer, Region: 7, Offset: 1000, Len: 700}
	if !ok || got != want {
		t.Errorf("Expectation(0) = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := d.Expectation(1); ok || !check(views[1], 1, 512) {
		t.Error("the frame after the expectation")
	}
	if got, ok := d.Expectation(2); !ok || got.Offset != 2000 || got.Len != 100 || !got.Requests {
		t.Errorf("Expectation(2) = %+v, %v", got, ok)
	}
	if got, ok := d.Expectation(3); !ok || got.Offset != 8000 || got.Len != 100 || got.Requests {
		t.Errorf("Expectation(3) = %+v, %v", got, ok)
	}
	d.ReleaseRx()
	if st := a.Stats(); st.ExpectationsSent != 3 || st.FramesSent != 1 {
		t.Errorf("app stats %+v", st)
	}

	// The daemon places two payloads and passes their headers; an
	// ordinary frame between them.
	place := func(n int, region uint32, off uint64, plen uint32) {
		b := d.TxBuf()
		copy(b, "HEADERS")
		d.TxSubmitPlaced(n, region, off, plen)
	}
	place(300, 7, 1000, 256)
	if n, err := d.Send([][]byte{frame(2, 512)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	place(100, 7, 1256, 44)
	d.Flush()
	if n := a.RecvZC(views); n != 3 {
		t.Fatalf("app got %d frames, want 3", n)
	}
	if p, ok := a.Placed(0); !ok || len(p) != 256 || &p[0] != &mem[1000] || len(views[0]) != 300 || string(views[0][:7]) != "HEADERS" {
		t.Errorf("Placed(0): %d bytes, %v; view of %d", len(p), ok, len(views[0]))
	}
	if p, ok := a.Placed(1); ok || p != nil || !check(views[1], 2, 512) {
		t.Error("an ordinary frame reported placed")
	}
	if p, ok := a.Placed(2); !ok || len(p) != 44 || &p[0] != &mem[1256] {
		t.Errorf("Placed(2): %d bytes, %v", len(p), ok)
	}
	if _, ok := a.Placed(3); ok {
		t.Error("Placed past the frames received")
	}
	// Through Recv, and into memory the End no longer knows.
	place(80, 7, 0, 10)
	place(80, 3, 0, 10)
	d.Flush()
	a.SetMemRegions([]MemRegion{{ID: 3, Mem: make([]byte, 64)}})
	in, sizes := bufs(8, 512)
	if n, err := a.Recv(in, sizes); n != 2 || err != nil || sizes[0] != 80 {
		t.Fatal(n, err, sizes[:n])
	}
	if p, ok := a.Placed(0); !ok || p != nil {
		t.Errorf("placed in a region given back: %d bytes, %v", len(p), ok)
	}
	if p, ok := a.Placed(1); !ok || len(p) != 10 {
		t.Errorf("Placed(1) after Recv: %d bytes, %v", len(p), ok)
	}
	if st := d.Stats(); st.PlacedSent != 4 || st.ExpectationsReceived != 3 {
		t.Errorf("daemon stats %+v", st)
	}
	if st := a.Stats(); st.PlacedReceived != 4 {
		t.Errorf("app stats %+v", st)
	}
}

// TestExpectNeedsAFreeSlot: no expectation while a TxBuf slot is lent (it
// would have to go after the frame it must precede) or the ring is full.
func TestExpectNeedsAFreeSlot(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 2, SlotSize: 256})
	a, d := r.AppEnd(), r.DaemonEnd()
	mem := make([]byte, 4096)
	a.SetMemRegions([]MemRegion{{ID: 1, Mem: mem}})
	x := link.Expectation{QPN: 1, Packets: 1, MTU: 256, Buf: mem[:100], Responses: true}
	b := a.TxBuf()
	a.Expect(&x)
	copy(b, frame(0, 256))
	a.TxSubmit(frameLen(0, 256))
	a.Flush()
	a.Expect(&x) // fills the ring
	a.Expect(&x) // no room
	views := make([][]byte, 4)
	if n := d.RecvZC(views); n != 2 {
		t.Fatalf("%d slots", n)
	}
	if _, ok := d.Expectation(0); ok || !check(views[0], 0, 256) {
		t.Error("the frame built while Expect was called")
	}
	if _, ok := d.Expectation(1); !ok {
		t.Error("the expectation")
	}
	if st := a.Stats(); st.ExpectationsSent != 1 {
		t.Errorf("ExpectationsSent %d", st.ExpectationsSent)
	}
}

// TestFlagsTrust: each side may set only its own flag, and an
// expectation only at its size; anything else is a bad region.
func TestFlagsTrust(t *testing.T) {
	for name, c := range map[string]struct {
		ring int
		word uint32
	}{
		"placed-from-app":     {ringFromApp, flagPlaced | 100},
		"expect-to-app":       {ringToApp, flagExpect | ExpectationSize},
		"expect-short":        {ringFromApp, flagExpect | 40},
		"unknown-flag":        {ringFromApp, 1<<28 | 100},
		"gather-to-app":       {ringToApp, flagGather | 100},
		"expect-and-gather":   {ringFromApp, flagExpect | flagGather | ExpectationSize},
		"unknown-flag-to-app": {ringToApp, 1<<25 | 100},
	} {
		t.Run(name, func(t *testing.T) {
			r := newTestRegion(t, Config{Slots: 8, SlotSize: 256})
			tx, rx := r.AppEnd(), r.DaemonEnd()
			if c.ring == ringToApp {
				tx, rx = rx, tx
			}
			if n, err := tx.Send([][]byte{frame(0, 256)}); n != 1 || err != nil {
				t.Fatal(n, err)
			}
			r.lenAt(c.ring, 0).Store(c.word)
			if n := rx.RecvZC(make([][]byte, 8)); n != 0 || !errors.Is(rx.Err(), ErrBadRegion) {
				t.Errorf("RecvZC: %d, %v", n, rx.Err())
			}
		})
	}
}

// TestPlacementAllocs: announcing, taking an expectation, placing,
// finding a placed payload and gathering allocate nothing.
func TestPlacementAllocs(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 64, SlotSize: 512})
	a, d := r.AppEnd(), r.DaemonEnd()
	mem := make([]byte, 65536)
	a.SetMemRegions([]MemRegion{{ID: 1, Mem: mem}})
	x := link.Expectation{QPN: 1, Packets: 4, MTU: 1024, Buf: mem[4096:8192], Responses: true}
	views := make([][]byte, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		a.Expect(&x)
		if d.RecvZC(views) != 1 {
			t.Fatal("no expectation")
		}
		if _, ok := d.Expectation(0); !ok {
			t.Fatal("not an expectation")
		}
		d.ReleaseRx()
		copy(d.TxBuf(), "HDR")
		d.TxSubmitPlaced(200, 1, 4096, 100)
		d.Flush()
		if a.RecvZC(views) != 1 {
			t.Fatal("no frame")
		}
		if p, ok := a.Placed(0); !ok || len(p) != 100 {
			t.Fatal("not placed")
		}
		a.ReleaseRx()
		copy(a.TxBuf(), "HDR")
		if !a.TxGather(64, mem[:100]) {
			t.Fatal("not gathered")
		}
		a.TxSubmit(200)
		a.Flush()
		if d.RecvZC(views) != 1 {
			t.Fatal("no gathered frame")
		}
		if _, _, _, _, ok := d.Gathered(0); !ok {
			t.Fatal("not flagged gathered")
		}
		d.ReleaseRx()
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per round", allocs)
	}
}

// TestGather: a frame whose payload the daemon is to take from a shared
// region crosses the from-app ring with its headers, full length and
// where its payload lies; payload outside every region, or past the
// frame, is refused or not sent.
func TestGather(t *testing.T) {
	r := newTestRegion(t, Config{Slots: 8, SlotSize: 2048})
	a, d := r.AppEnd(), r.DaemonEnd()
	mem := make([]byte, 8192)
	if a.TxGather(0, mem[:10]) {
		t.Error("TxGather with no slot lent")
	}
	a.SetMemRegions([]MemRegion{{ID: 4, Mem: mem}})
	if a.TxGather(0, mem[:10]) {
		t.Error("TxGather with no slot lent")
	}
	b := a.TxBuf()
	copy(b, "HEADERS")
	if a.TxGather(50, make([]byte, 10)) {
		t.Error("payload outside every region taken")
	}
	if a.TxGather(1500, mem[:1000]) {
		t.Error("payload past the slot taken")
	}
	if !a.TxGather(50, mem[100:1100]) {
		t.Fatal("TxGather refused")
	}
	a.TxSubmit(1200)
	copy(a.TxBuf(), "PAST")
	a.TxGather(50, mem[:1000])
	a.TxSubmit(1000) // the payload would end past the frame: not sent
	if n, err := a.Send([][]byte{frame(1, 2048)}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	views := make([][]byte, 8)
	if n := d.RecvZC(views); n != 2 {
		t.Fatalf("daemon got %d frames, want 2", n)
	}
	if reg, at, off, n, ok := d.Gathered(0); !ok || reg != 4 || at != 50 || off != 100 || n != 1000 || len(views[0]) != 1200 || string(views[0][:7]) != "HEADERS" {
		t.Errorf("Gathered(0) = %d %d %d %d %v, view of %d", reg, at, off, n, ok, len(views[0]))
	}
	if _, _, _, _, ok := d.Gathered(1); ok || !check(views[1], 1, 2048) {
		t.Error("an ordinary frame reported gathered")
	}
	if _, _, _, _, ok := d.Gathered(2); ok {
		t.Error("Gathered past the frames received")
	}
	if st := a.Stats(); st.GatheredSent != 1 {
		t.Errorf("GatheredSent %d", st.GatheredSent)
	}
	if st := d.Stats(); st.GatheredReceived != 1 {
		t.Errorf("GatheredReceived %d", st.GatheredReceived)
	}
}
