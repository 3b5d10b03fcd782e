package daemon

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// deliverBench is a worker delivering 1 KiB RC frames to an application
// whose ring it drains every batch, as the application would.
type deliverBench struct {
	f      *placeFixture
	frames [][]byte
	views  [][]byte
}

func newDeliverBench(tb testing.TB, op wire.Opcode) *deliverBench {
	f := newPlaceFixture(tb)
	f.a.ends = []*shmlink.End{f.ring.DaemonEnd()}
	f.a.st = make([]appCounters, 1)
	d := &deliverBench{f: f, views: make([][]byte, 64)}
	for k := range uint32(32) {
		d.frames = append(d.frames, rcFrame(&f.peer, op, 0x42, k, pattern(1024, byte(k))))
	}
	return d
}

// batch delivers the 32 frames (PSNs 0 to 31, over again: the queue
// pair starts again first) and lets the application take them.
func (d *deliverBench) batch() {
	d.f.w.d.restart(0x42)
	d.deliver()
}

// deliver is batch without starting the queue pair again (after expect).
func (d *deliverBench) deliver() {
	for i, f := range d.frames {
		d.f.w.admit(i, f)
	}
	d.f.w.publish([]*app{d.f.a})
	app := d.f.ring.AppEnd()
	app.RecvZC(d.views)
	app.ReleaseRx()
}

// expect announces the rest of a write of 32 packets from PSN 0 into the
// region, after the queue pair starts again.
func (d *deliverBench) expect(tb testing.TB) {
	d.f.w.d.restart(0x42)
	x := shmlink.Expectation{QPN: 0x42, PSN: 0, Packets: 32, MTU: 1024, Peer: d.f.peer.Fields().Src.As16(), Region: 5, Len: 32 * 1024, Requests: true}
	if !d.f.w.expect(d.f.a, &x, int64(time.Since(d.f.w.epoch))) {
		tb.Fatal("expectation refused")
	}
}

// TestDeliverNoAllocs: delivering frames to an application, whole or
// placed, allocates nothing.
func TestDeliverNoAllocs(t *testing.T) {
	d := newDeliverBench(t, wire.RCWriteMiddle)
	if n := testing.AllocsPerRun(200, d.batch); n != 0 {
		t.Errorf("whole: %v allocations per batch", n)
	}
	if n := testing.AllocsPerRun(200, func() {
		d.expect(t)
		d.deliver()
	}); n != 0 {
		t.Errorf("placed: %v allocations per batch", n)
	}
	if d.f.a.st[0].placed.Load() < 200*32 {
		t.Fatalf("%d frames placed", d.f.a.st[0].placed.Load())
	}
}

// BenchmarkDeliver: a daemon worker's cost per 1 KiB frame from the NIC's
// ring to an application's: parsed, its owner found, where it arrived
// recorded, and copied whole onto the ring, or its payload placed in the
// application's memory (ICRC checked) and its headers passed.
func BenchmarkDeliver(b *testing.B) {
	for _, placed := range []bool{false, true} {
		b.Run(map[bool]string{false: "whole", true: "placed"}[placed], func(b *testing.B) {
			d := newDeliverBench(b, wire.RCWriteMiddle)
			b.SetBytes(32 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				if placed {
					d.expect(b)
					d.deliver()
				} else {
					d.batch()
				}
			}
		})
	}
}

// newCheckFixture is a worker and an application, and a 64 B RDMA write
// to QP 0x77 at dst from the device's own MAC and address, as the
// worker's check (allowed) wants them.
func newCheckFixture(tb testing.TB) (*placeFixture, []byte, netip.Addr) {
	f := newPlaceFixture(tb)
	frame := rcFrame(&f.peer, wire.RCWriteOnly, 0x77, 1, pattern(64, 1))
	var p wire.Packet
	if err := p.Parse(frame); err != nil {
		tb.Fatal(err)
	}
	f.w.d.mac = p.Ethernet().Src()
	f.w.d.srcs = []netip.Addr{p.Src().Unmap()}
	return f, frame, p.Dst().Unmap()
}

// BenchmarkCheck: a daemon worker's cost per 64 B RDMA write an
// application sends: copied out of the ring (frameOf) and checked
// (allowed: RoCEv2 from the device's MAC and address, to a peer one of the
// application's queue pairs is connected to), before it goes to the NIC.
func BenchmarkCheck(b *testing.B) {
	f, frame, dst := newCheckFixture(b)
	peers := map[peerKey]struct{}{{dst, 0x77}: {}}
	for i := range 15 {
		peers[peerKey{dst, uint32(0x100 + i)}] = struct{}{}
	}
	e := f.ring.DaemonEnd()
	app := f.ring.AppEnd()
	views := make([][]byte, 1)
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if n, err := app.Send([][]byte{frame}); n != 1 || err != nil {
			b.Fatal(n, err)
		}
		if e.RecvZC(views) != 1 {
			b.Fatal("nothing on the ring")
		}
		c, ok := f.w.frameOf(f.a, e, 0, views[0], buf)
		if !ok || !f.w.allowed(f.a, c, &peers) {
			b.Fatal("refused")
		}
		e.ReleaseRx()
	}
}

// TestAllowedPeerRevoked: the worker remembers the last peer it allowed,
// but only for the peer set it found it in: once the application's
// peers are published without it, its frames are refused.
func TestAllowedPeerRevoked(t *testing.T) {
	f, frame, dst := newCheckFixture(t)
	with := map[peerKey]struct{}{{dst, 0x77}: {}}
	without := map[peerKey]struct{}{{dst, 0x78}: {}}
	// The first look finds the peer in the set, the second in the
	// worker's memory of it.
	for range 2 {
		if !f.w.allowed(f.a, frame, &with) {
			t.Fatal("a frame to a connected peer refused")
		}
	}
	if f.w.allowed(f.a, frame, &without) {
		t.Fatal("a frame to a peer no longer connected allowed")
	}
	if !f.w.allowed(f.a, frame, &with) {
		t.Fatal("a frame to a connected peer refused after a refusal")
	}
}
