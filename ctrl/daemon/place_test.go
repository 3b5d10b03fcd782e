package daemon

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// placeFixture is a worker, an application owning QPN 0x42 with a
// 64 KiB region 5, another owning 0x43, and the first's ring.
type placeFixture struct {
	w           *worker
	a, other    *app
	mem         []byte
	ring        *shmlink.Region
	peer, stray wire.Path
}

func newPlaceFixture(t testing.TB) *placeFixture {
	d := &Daemon{owner: make([]atomic.Pointer[app], 1<<16), rx: make([]atomic.Uint64, 1<<16), rxEnd: make([]atomic.Uint32, 1<<16), gen: make([]atomic.Uint32, 1<<16)}
	f := &placeFixture{w: &worker{d: d, exp: map[uint32]*qpExpect{}, epoch: time.Now()}, a: &app{}, other: &app{}, mem: make([]byte, 1<<16)}
	f.a.mem.Store(&map[uint32][]byte{5: f.mem})
	f.other.mem.Store(&map[uint32][]byte{5: make([]byte, 1<<16)})
	d.owner[0x42].Store(f.a)
	d.owner[0x43].Store(f.other)
	r, err := shmlink.Create("place-test", shmlink.Config{Slots: 64, SlotSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f.ring = r
	r.AppEnd().SetMemRegions([]shmlink.MemRegion{{ID: 5, Mem: f.mem}})
	for i, src := range []string{"198.18.0.2", "198.18.0.3"} {
		p, err := wire.NewPath(wire.PathFields{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("198.18.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			f.peer = p
		} else {
			f.stray = p
		}
	}
	return f
}

// frame builds an RC packet over path.
func rcFrame(path *wire.Path, op wire.Opcode, qpn, psn uint32, payload []byte) []byte {
	info := op.Info()
	pad := (4 - len(payload)%4) % 4
	hl := path.HeaderLen()
	f := make([]byte, hl+info.HeaderLen+len(payload)+pad+wire.ICRCSize)
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: op, DestQP: qpn, PSN: psn, PadCount: uint8(pad), PKey: 0xffff})
	copy(f[hl+info.HeaderLen:], payload)
	path.Finish(f)
	return f
}

// placeOnRing offers the parsed frame to w.place in the next slot of
// ring e, as deliver does: not at all when the ring has none that fits.
func placeOnRing(w *worker, a *app, e *shmlink.End, p *wire.Packet, frame []byte) bool {
	buf := e.TxBuf()
	if buf == nil || len(frame) > len(buf) {
		return false
	}
	return w.place(a, e, buf, p, frame)
}

// try parses frame and offers it to the worker for application a.
func (f *placeFixture) try(t *testing.T, a *app, frame []byte) bool {
	t.Helper()
	var p wire.Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	ok := placeOnRing(f.w, a, f.ring.DaemonEnd(), &p, frame)
	if ok {
		f.ring.DaemonEnd().Flush()
	}
	return ok
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestPlace: an announced READ's responses land in the region in order,
// each once, and reach the application as headers marked placed; every
// packet the expectation does not cover exactly passes whole.
func TestPlace(t *testing.T) {
	f := newPlaceFixture(t)
	w := f.w
	now := int64(time.Since(w.epoch))
	x := shmlink.Expectation{QPN: 0x42, PSN: 0xfffffe, Packets: 3, MTU: 256, Peer: f.peer.Fields().Src.As16(), Region: 5, Offset: 1000, Len: 600}
	for name, bad := range map[string]func(x *shmlink.Expectation){
		"another's qpn":      func(x *shmlink.Expectation) { x.QPN = 0x43 },
		"no owner":           func(x *shmlink.Expectation) { x.QPN = 0x44 },
		"qpn out of range":   func(x *shmlink.Expectation) { x.QPN = 1 << 24 },
		"unknown region":     func(x *shmlink.Expectation) { x.Region = 6 },
		"past the region":    func(x *shmlink.Expectation) { x.Offset = 1<<16 - 500 },
		"offset far out":     func(x *shmlink.Expectation) { x.Offset = 1 << 63 },
		"mtu not a power":    func(x *shmlink.Expectation) { x.MTU = 300 },
		"mtu too large":      func(x *shmlink.Expectation) { x.MTU = 8192 },
		"no packets":         func(x *shmlink.Expectation) { x.Packets = 0 },
		"more than packets":  func(x *shmlink.Expectation) { x.Len = 769 },
		"fewer than packets": func(x *shmlink.Expectation) { x.Len = 512 },
		"empty":              func(x *shmlink.Expectation) { x.Len = 0 },
		"psn over 24 bits":   func(x *shmlink.Expectation) { x.PSN = 1 << 24 },
	} {
		y := x
		bad(&y)
		if w.expect(f.a, &y, now) {
			t.Errorf("%s: expectation taken", name)
		}
	}
	if w.nexp != 0 {
		t.Fatalf("%d live expectations after refusals", w.nexp)
	}
	if !w.expect(f.a, &x, now) || w.nexp != 1 {
		t.Fatal("expectation refused")
	}
	p1, p2, p3 := pattern(256, 1), pattern(256, 2), pattern(88, 3)
	cases := []struct {
		name  string
		a     *app
		frame []byte
		place bool
	}{
		{"first", f.a, rcFrame(&f.peer, wire.RCReadResponseFirst, 0x42, 0xfffffe, p1), true},
		{"a psn ahead", f.a, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 0, p2), false},
		{"short middle", f.a, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 0xffffff, p2[:200]), false},
		{"another peer", f.a, rcFrame(&f.stray, wire.RCReadResponseMiddle, 0x42, 0xffffff, p2), false},
		{"another application", f.other, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 0xffffff, p2), false},
		{"not a continuation", f.a, rcFrame(&f.peer, wire.RCWriteFirst, 0x42, 0xffffff, p2), false},
		{"bad icrc", f.a, func() []byte {
			b := rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 0xffffff, p2)
			b[len(b)-1] ^= 1
			return b
		}(), false},
		{"middle", f.a, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 0xffffff, p2), true},
		{"last past the buffer", f.a, rcFrame(&f.peer, wire.RCReadResponseLast, 0x42, 0, pattern(89, 3)), false},
		{"last", f.a, rcFrame(&f.peer, wire.RCReadResponseLast, 0x42, 0, p3), true},
		{"last again", f.a, rcFrame(&f.peer, wire.RCReadResponseLast, 0x42, 0, p3), false},
	}
	placed := 0
	for _, c := range cases {
		if got := f.try(t, c.a, c.frame); got != c.place {
			t.Errorf("%s: placed %v, want %v", c.name, got, c.place)
		}
		if c.place {
			placed++
		}
	}
	if want := append(append(append([]byte{}, p1...), p2...), p3...); !bytes.Equal(f.mem[1000:1600], want) {
		t.Error("the region does not hold the responses' payload")
	}
	if bytes.ContainsFunc(f.mem[:1000], func(r rune) bool { return r != 0 }) || bytes.ContainsFunc(f.mem[1600:], func(r rune) bool { return r != 0 }) {
		t.Error("bytes written outside the buffer")
	}
	if w.nexp != 0 {
		t.Errorf("%d live expectations after the last packet", w.nexp)
	}
	// The application sees the headers, the full length, and its payload
	// where the daemon put it.
	app := f.ring.AppEnd()
	views := make([][]byte, 8)
	if n := app.RecvZC(views); n != placed {
		t.Fatalf("the ring holds %d frames, want %d", n, placed)
	}
	for i, c := range []struct {
		frame   []byte
		payload []byte
		off     int
	}{{cases[0].frame, p1, 1000}, {cases[7].frame, p2, 1256}, {cases[9].frame, p3, 1512}} {
		pl, ok := app.Placed(i)
		var p wire.Packet
		if !ok || &pl[0] != &f.mem[c.off] || !bytes.Equal(pl, c.payload) || len(views[i]) != len(c.frame) || p.Parse(views[i]) != nil ||
			!bytes.Equal(views[i][:p.BTHOff+p.Info.HeaderLen], c.frame[:p.BTHOff+p.Info.HeaderLen]) ||
			// the pad and ICRC too: handed to another worker, the
			// frame gets its payload back and its ICRC checked
			!bytes.Equal(views[i][p.BTHOff+p.Info.HeaderLen+len(c.payload):], c.frame[p.BTHOff+p.Info.HeaderLen+len(c.payload):]) {
			t.Errorf("frame %d: placed %v, %d bytes", i, ok, len(pl))
		}
	}
}

// TestPlaceSupersede: an expectation asked again (a read retried from its
// third packet) replaces the one it overlaps; one that lapsed, or whose
// region was given back, places nothing.
func TestPlaceSupersede(t *testing.T) {
	f := newPlaceFixture(t)
	w := f.w
	now := int64(time.Since(w.epoch))
	peer := f.peer.Fields().Src.As16()
	first := shmlink.Expectation{QPN: 0x42, PSN: 100, Packets: 4, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 1024}
	w.expect(f.a, &first, now)
	for k := uint32(0); k < 2; k++ {
		if !f.try(t, f.a, rcFrame(&f.peer, wire.RCReadResponseMiddle, 0x42, 100+k, pattern(256, byte(k)))) {
			t.Fatalf("packet %d not placed", k)
		}
	}
	again := shmlink.Expectation{QPN: 0x42, PSN: 102, Packets: 2, MTU: 256, Peer: peer, Region: 5, Offset: 4096, Len: 512}
	other := shmlink.Expectation{QPN: 0x42, PSN: 500, Packets: 1, MTU: 256, Peer: peer, Region: 5, Offset: 8192, Len: 256}
	w.expect(f.a, &other, now)
	w.expect(f.a, &again, now)
	if w.nexp != 2 {
		t.Fatalf("%d live expectations, want 2 (the overlapped one dropped)", w.nexp)
	}
	// As many reads in flight as a queue pair may have (16) keep their
	// expectations; one more pushes out the oldest.
	for i := range uint32(expectPerQP + 1) {
		x := shmlink.Expectation{QPN: 0x42, PSN: 1000 + 10*i, Packets: 1, MTU: 256, Peer: peer, Region: 5, Offset: 16384, Len: 256}
		w.expect(f.a, &x, now)
	}
	if q := w.exp[0x42]; q.n != expectPerQP || q.e[0].psn != 1010 || q.e[expectPerQP-1].psn != 1000+10*expectPerQP {
		t.Fatalf("%d kept, from PSN %d to %d", q.n, q.e[0].psn, q.e[q.n-1].psn)
	}
	// Back to the two of before.
	w.exp[0x42].n, w.nexp = 0, 0
	w.expect(f.a, &other, now)
	w.expect(f.a, &again, now)
	if !f.try(t, f.a, rcFrame(&f.peer, wire.RCReadResponseFirst, 0x42, 102, pattern(256, 9))) || !bytes.Equal(f.mem[4096:4352], pattern(256, 9)) {
		t.Error("the new expectation did not place its first packet at its buffer")
	}
	// Lapsed: the worker's clock past its life.
	w.now = now + expectTTL + 1
	if f.try(t, f.a, rcFrame(&f.peer, wire.RCReadResponseLast, 0x42, 103, pattern(10, 1))) {
		t.Error("placed under a lapsed expectation")
	}
	// Given back: the region gone from the application's memory.
	w.now = now
	f.a.mem.Store(&map[uint32][]byte{})
	if f.try(t, f.a, rcFrame(&f.peer, wire.RCReadResponseOnly, 0x42, 500, pattern(256, 1))) {
		t.Error("placed in a region given back")
	}
}

// TestPruneExpect: the worker forgets expectations that lapsed and those
// of an application that no longer owns the queue pair, keeping no
// pointer to it.
func TestPruneExpect(t *testing.T) {
	f := newPlaceFixture(t)
	w := f.w
	now := int64(time.Since(w.epoch))
	peer := f.peer.Fields().Src.As16()
	for i, qpn := range []uint32{0x42, 0x42, 0x43} {
		a := f.a
		if qpn == 0x43 {
			a = f.other
		}
		x := shmlink.Expectation{QPN: qpn, PSN: uint32(100 * (i + 1)), Packets: 2, MTU: 256, Peer: peer, Region: 5, Offset: 0, Len: 512}
		if !w.expect(a, &x, now+int64(i)) {
			t.Fatalf("expectation %d refused", i)
		}
	}
	if w.nexp != 3 || len(w.exp) != 2 {
		t.Fatalf("%d live in %d queue pairs, want 3 in 2", w.nexp, len(w.exp))
	}
	w.pruneExpect(now + expectTTL) // the first lapses: it expires at now+TTL
	if w.nexp != 2 || w.exp[0x42].n != 1 {
		t.Fatalf("after a lapse: %d live, %d for 0x42", w.nexp, w.exp[0x42].n)
	}
	w.d.owner[0x43].Store(nil) // the other application detached
	w.pruneExpect(now)
	if w.nexp != 1 || w.exp[0x43] != nil {
		t.Fatalf("after a detach: %d live, 0x43 %v", w.nexp, w.exp[0x43])
	}
	for _, o := range w.exp[0x42].e[w.exp[0x42].n:] {
		if o.a != nil {
			t.Fatal("a pruned slot still points to its application")
		}
	}
}

// FuzzPlace: whatever expectation an application announces and whatever
// frame arrives, the worker never panics and never writes outside the
// buffer of an expectation it took.
func FuzzPlace(f *testing.F) {
	f.Add(uint32(0x42), uint32(10), uint32(3), uint32(256), uint32(5), uint64(1000), uint64(600), false, uint8(wire.RCReadResponseFirst), uint32(10), uint16(256))
	f.Add(uint32(0x42), uint32(0xffffff), uint32(1), uint32(4096), uint32(5), uint64(1<<16-4096), uint64(4096), true, uint8(wire.RCWriteLast), uint32(0xffffff), uint16(4096))
	f.Add(uint32(0x42), uint32(7), uint32(9), uint32(1024), uint32(5), uint64(60000), uint64(9000), true, uint8(wire.RCSendMiddle), uint32(7), uint16(1024))
	f.Fuzz(func(t *testing.T, qpn, ps, packets, mtu, region uint32, off, n uint64, req bool, op uint8, fps uint32, plen uint16) {
		fx := newPlaceFixture(t)
		w := fx.w
		for i := range fx.mem {
			fx.mem[i] = 0xee
		}
		x := shmlink.Expectation{QPN: qpn, PSN: ps, Packets: packets, MTU: mtu, Peer: fx.peer.Fields().Src.As16(), Region: region, Offset: off, Len: n, Requests: req}
		took := w.expect(fx.a, &x, int64(time.Since(w.epoch)))
		if info := wire.Opcode(op).Info(); info.Mask == 0 || info.HeaderLen < wire.BTHSize {
			return // not an opcode: no frame to build
		}
		for k := range uint32(3) {
			frame := rcFrame(&fx.peer, wire.Opcode(op), qpn&0xffff, (fps+k)&0xffffff, pattern(int(plen%4097), byte(k)))
			var p wire.Packet
			if p.Parse(frame) != nil {
				return
			}
			if placeOnRing(w, fx.a, fx.ring.DaemonEnd(), &p, frame) && !took {
				t.Fatal("placed with no expectation taken")
			}
			fx.ring.DaemonEnd().Flush()
			fx.ring.AppEnd().RecvZC(make([][]byte, 8))
			fx.ring.AppEnd().ReleaseRx()
		}
		lo, hi := uint64(0), uint64(0)
		if took {
			lo, hi = off, off+n
		}
		for i, b := range fx.mem {
			if b != 0xee && (uint64(i) < lo || uint64(i) >= hi) {
				t.Fatalf("byte %d written, outside the buffer [%d, %d)", i, lo, hi)
			}
		}
	})
}
