package test

import (
	"bytes"
	"testing"

	"github.com/softfabric/softfabric/bpf/impair"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestPlacedReads: through the daemons, an application reads into memory
// it shares with its daemon (device.AllocMemory); the daemon writes the
// responses' payload straight there and passes only their headers. Reads
// of several sizes, at unaligned offsets, are byte-exact, and almost every
// response is placed; then the same over a wire that drops, corrupts and
// duplicates RoCEv2 frames, where the transport recovers what placement
// gives up on. Writes and sends into the shared memory are checked too
// (placed after their first packets), and a write and a read served from
// it (gathered).
func TestPlacedReads(t *testing.T) {
	for _, impaired := range []bool{false, true} {
		name := "clean"
		if impaired {
			name = "impaired"
		}
		t.Run(name, func(t *testing.T) { testPlacedReads(t, impaired) })
	}
}

// placementPair is two hosts whose veths have queues (0: as made by
// default), each up with a daemon, on a wire that drops, corrupts and
// duplicates 2 % of the RoCEv2 frames when impaired; an application at
// each end, and 8 MiB that a's shares with its daemon, registered.
func placementPair(t *testing.T, queues int, impaired bool) (p *netnstest.Pair, a, b *end, mem []byte, shared *mr.Region) {
	t.Helper()
	p = setup(t, netnstest.Options{Queues: queues}, impaired)
	up(t, p.A, p.B)
	if impaired {
		for _, im := range impairWire(t, p, impair.Config{DropPPM: 20_000, CorruptPPM: 20_000, DuplicatePPM: 20_000, UDPPort: impair.RoCEv2Port}) {
			t.Cleanup(func() { im.Close() })
		}
	}
	a, b = open(t, p.A), open(t, p.B)
	if !a.d.Attached() {
		t.Fatal("the device is not attached to a daemon")
	}
	mem, free, err := a.d.AllocMemory(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = free() })
	if shared, err = a.d.MRs().Register(mem, all); err != nil {
		t.Fatal(err)
	}
	return p, a, b, mem, shared
}

func testPlacedReads(t *testing.T, impaired bool) {
	p, a, b, mem, shared := placementPair(t, 0, impaired)
	fill(b.buf.Bytes(), 7)
	// A 537 ms ACK timeout, as the many-application tests use: CI runs
	// other packages' daemons and pollers beside this one on two cores,
	// and a 4 MiB read losing 4 % of its responses must not run out of
	// retries while starved.
	qa, qb := rcPairWith(t, a, b, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16), 0, 0, device.ConnectOptions{Timeout: 17})
	reads := []struct{ local, remote, n int }{
		{0, 0, 64 << 10}, {1 << 20, 4096, 1 << 20}, {3<<20 + 100, 12345, 300_001}, {4 << 20, 0, 4 << 20}, {2<<20 + 100, 1<<20 + 7, 1000},
	}
	before := placedFrames(t, p.A)
	for round := range 3 {
		clear(mem)
		for i, r := range reads {
			wr := verbs.SendWR{Op: verbs.OpRead, Flags: verbs.Signaled, SGL: sge(shared, r.local, r.n),
				RemoteAddr: b.buf.Addr() + uint64(r.remote), RKey: b.buf.RKey(), ID: uint64(i)}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range poll(t, a, b, a.scq, len(reads)) {
			if c.Status != verbs.Success {
				t.Fatalf("round %d: read %d: %v", round, c.WRID, c.Status)
			}
		}
		for i, r := range reads {
			if !bytes.Equal(mem[r.local:r.local+r.n], b.buf.Bytes()[r.remote:r.remote+r.n]) {
				got, want := mem[r.local:r.local+r.n], b.buf.Bytes()[r.remote:r.remote+r.n]
				k := 0
				for k < len(got) && got[k] == want[k] {
					k++
				}
				t.Logf("first difference at %d: got % x want % x; placed %d; engine %+v", k, got[k:k+8], want[k:k+8], placedFrames(t, p.A), a.d.Stats())
				t.Fatalf("round %d: read %d (%d bytes) is not what the peer holds", round, i, r.n)
			}
		}
	}
	var packets uint64
	mtu := uint64(qa.Attr().PathMTU)
	for _, r := range reads {
		packets += 3 * ((uint64(r.n) + mtu - 1) / mtu)
	}
	placed := placedFrames(t, p.A) - before
	t.Logf("%d of %d read responses placed (MTU %d)", placed, packets, mtu)
	// Responses sent again (after a loss: the wire's here, or a full ring
	// even on a clean one) are placed again under the repeated request.
	// A response dropped for the application's full ring ends its read's
	// placement, and the rest of the read arrives whole until the
	// transport asks again: 14578 of 16434 placed in such a run, 1 in 8 on
	// 2 vCPUs when such frames were dropped at once. The daemon now parks
	// them, and drops only past about 1,800 frames behind (its ring and
	// three quarters of the worker's spare chunks), which a 4 MiB read of
	// 4096 responses can still reach with the application descheduled.
	switch {
	case !impaired && placed < packets*3/4:
		t.Fatalf("only %d of %d responses placed", placed, packets)
	case impaired && placed < packets/2:
		t.Fatalf("only %d of %d responses placed under impairment", placed, packets)
	}

	// A write into the shared memory, from the peer: its first packets
	// arrive whole, then the transport announces the rest and the daemon
	// places it, from after the furthest packet it passed.
	fill(b.buf.Bytes()[:2<<20], 9)
	before = placedFrames(t, p.A)
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(b.buf, 0, 2<<20), RemoteAddr: shared.Addr() + 333, RKey: shared.RKey(), ID: 99}
	if err := qb.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := poll(t, a, b, b.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("write: %v", c[0].Status)
	}
	if !bytes.Equal(mem[333:333+2<<20], b.buf.Bytes()[:2<<20]) {
		t.Fatal("the write's data is not in the shared memory")
	}
	wpackets := uint64(2<<20) / mtu
	n := placedFrames(t, p.A) - before
	t.Logf("%d of a write's %d packets placed", n, wpackets)
	if !impaired && n < wpackets/2 {
		t.Fatalf("only %d of a write's %d packets placed", n, wpackets)
	}

	// Sends into receive buffers in shared memory: each lands in its own
	// buffer, with its length, the rest of the large ones placed.
	sizes := []int{64 << 10, 1 << 20, 5000, 1024, 300_001}
	before = placedFrames(t, p.A)
	for i := range sizes {
		if err := qa.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sge(shared, 6<<20+i*(1<<20)/4, 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range sizes {
		fill(b.buf.Bytes()[:n], uint64(20+i))
		snd := verbs.SendWR{Op: verbs.OpSend, Flags: verbs.Signaled, SGL: sge(b.buf, 0, n), ID: uint64(200 + i)}
		if err := qb.PostSend(&snd); err != nil {
			t.Fatal(err)
		}
		if c := poll(t, a, b, b.scq, 1); c[0].Status != verbs.Success {
			t.Fatalf("send %d: %v", i, c[0].Status)
		}
		c := poll(t, a, b, a.rcq, 1)[0]
		off := 6<<20 + int(c.WRID)*(1<<20)/4
		if c.Status != verbs.Success || c.WRID != uint64(i) || int(c.ByteLen) != n || !bytes.Equal(mem[off:off+n], b.buf.Bytes()[:n]) {
			t.Fatalf("send %d of %d bytes: %v, receive %d of %d bytes, data equal %v", i, n, c.Status, c.WRID, c.ByteLen, bytes.Equal(mem[off:off+n], b.buf.Bytes()[:n]))
		}
	}
	n = placedFrames(t, p.A) - before
	t.Logf("%d packets of sends placed", n)
	if !impaired && n == 0 {
		t.Fatal("no packet of a send placed")
	}

	// Sent from shared memory: A writes from it and B reads from it; A's
	// daemon takes every data packet's payload from there (gathered), and
	// A's transport copies none.
	fill(mem[:2<<20], 11)
	before = gatheredFrames(t, p.A)
	wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(shared, 0, 2<<20), RemoteAddr: b.buf.Addr(), RKey: b.buf.RKey(), ID: 100}
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := poll(t, a, b, a.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("write from shared memory: %v", c[0].Status)
	}
	if !bytes.Equal(b.buf.Bytes()[:2<<20], mem[:2<<20]) {
		t.Fatal("the write from shared memory did not carry its data")
	}
	const rn = 1<<20 + 5
	rd := verbs.SendWR{Op: verbs.OpRead, Flags: verbs.Signaled, SGL: sge(b.buf, 2<<20+100, rn), RemoteAddr: shared.Addr() + 12345, RKey: shared.RKey(), ID: 101}
	if err := qb.PostSend(&rd); err != nil {
		t.Fatal(err)
	}
	if c := poll(t, a, b, b.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("read from shared memory: %v", c[0].Status)
	}
	if !bytes.Equal(b.buf.Bytes()[2<<20+100:2<<20+100+rn], mem[12345:12345+rn]) {
		t.Fatal("the read from shared memory did not carry its data")
	}
	gathered := gatheredFrames(t, p.A) - before
	want := uint64((2<<20)/mtu + (rn+mtu-1)/mtu)
	t.Logf("%d of %d data packets sent from shared memory gathered", gathered, want)
	if !impaired && gathered < want || impaired && gathered < want/2 {
		t.Fatalf("%d of %d data packets gathered", gathered, want)
	}
}

// gatheredFrames is how many frames h's daemon sent whose payload it took
// from an application's shared memory.
func gatheredFrames(t *testing.T, h *netnstest.Host) uint64 {
	t.Helper()
	return sumApps(t, h, func(a daemonapi.AppStats) uint64 { return a.Gathered })
}

// placedFrames is how many frames h's daemon placed for its applications.
func placedFrames(t *testing.T, h *netnstest.Host) uint64 {
	t.Helper()
	return sumApps(t, h, func(a daemonapi.AppStats) uint64 { return a.Placed })
}
