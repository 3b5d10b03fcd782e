package hfidev

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// b2bConfig makes every limit bite within a few thousand packets: 100 PIO
// credits (the 11-bit counters wrap every ~20 packets of the larger
// sizes), a 64-entry RcvHdrQ, 16 eager buffers of 8 KiB.
func b2bConfig(c *model.Config) {
	c.Credits, c.RcvHdrqCnt, c.EgrTIDs, c.RcvEgrSize = 100, 64, 16, 8192
}

// b2bSize is packet seq's payload length: 0 to 6332 bytes, all dword
// multiples, as many sizes as there are packets.
func b2bSize(seq uint32) int { return 4 * int(seq*7919%1584) }

// peerEnd is one direction's receiving side: what it checked.
type peerEnd struct {
	next uint32 // lowest seq it may still see
	ok   uint64 // packets delivered whole
	egr  uint64 // of those, with a payload in an eager buffer
	eagr uint64 // headers without their payload (eager full)
}

// check takes one received packet of a stream that sends seq 0, 1, 2…:
// seqs only grow (lost ones are skipped, none repeat or reorder), the
// header is the one sent and the payload byte-exact, or absent with
// ErrEagerFull.
func (e *peerEnd) check(tb testing.TB, from, to *Context, p *Packet) {
	tb.Helper()
	seq := p.Header.SWData(0)
	if seq < e.next {
		tb.Fatalf("ctxt %d: seq %d after %d: repeated or reordered", to.Info.Ctxt, seq, e.next-1)
	}
	e.next = seq + 1
	n := b2bSize(seq)
	want := make([]byte, abi.Header9BSize)
	kdethHeader(want, from, to, seq, n)
	if !bytes.Equal(p.Header, want) {
		tb.Fatalf("seq %d: header differs", seq)
	}
	switch {
	case p.Err == nil:
		if !bytes.Equal(p.Payload, pattern(n, byte(seq))) {
			tb.Fatalf("seq %d: payload of %d bytes differs (%d received)", seq, n, len(p.Payload))
		}
		e.ok++
		if p.Fields.UseEgrBfr {
			e.egr++
		}
	case errors.Is(p.Err, ErrEagerFull):
		e.eagr++
	default:
		tb.Fatalf("seq %d: %v", seq, p.Err)
	}
}

// drain polls up to max packets (all with max < 0).
func (e *peerEnd) drain(tb testing.TB, from, to *Context, max int) {
	r := to.Receiver()
	for i := 0; max < 0 || i < max; i++ {
		p, ok := r.Poll()
		if !ok {
			return
		}
		e.check(tb, from, to, p)
		r.Release()
	}
}

// account checks, after both sides drained, that every packet sent is
// accounted for exactly once: written whole, written without payload
// (eager full) or dropped on a full RcvHdrQ.
func account(t *testing.T, u *model.Unit, to *Context, e *peerEnd, sent uint64) model.RcvStats {
	t.Helper()
	s := rcvStats(t, u, to)
	if e.ok+e.eagr != s.Packets || s.Packets+s.HdrqFull != sent || s.EgrFull != e.eagr || e.egr != s.Eager {
		t.Errorf("ctxt %d: sent %d, whole %d, no payload %d, stats %+v", to.Info.Ctxt, sent, e.ok, e.eagr, s)
	}
	return s
}

// Two units back to back: thousands of packets of every size each way, the
// receivers polling irregularly so that each side's RcvHdrQ and eager
// buffers fill at times. Credits, the credit counters, the RcvHdrQ and
// RcvSeq all wrap many times.
func TestBackToBack(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, b2bConfig)
		rng := rand.New(rand.NewPCG(13, uint64(chip)))
		var ab, ba peerEnd // A→B seen at B, B→A seen at A
		const n = 6000
		hdr := make([]byte, abi.Header9BSize)
		budget := 0
		for seq := range uint32(n) {
			for _, d := range [2]struct{ from, to *Context }{{l.a, l.b}, {l.b, l.a}} {
				size := b2bSize(seq)
				kdethHeader(hdr, d.from, d.to, seq, size)
				pbc := (&abi.PBCFields{CreditReturn: seq%5 == 0, L2Type: abi.L2Type9B, DLID: uint32(lid(d.to))}).Encode(chip)
				sendPIO(t, d.from, pbc, hdr, pattern(size, byte(seq)))
			}
			// Each side reads a burst now and then: sometimes all, sometimes a
			// few, sometimes nothing for a long stretch (its queue fills).
			if budget--; budget <= 0 {
				budget = rng.IntN(60)
				k := []int{-1, -1, 3, 20, 0}[rng.IntN(5)]
				ab.drain(t, l.a, l.b, k)
				ba.drain(t, l.b, l.a, k)
			}
		}
		ab.drain(t, l.a, l.b, -1)
		ba.drain(t, l.b, l.a, -1)
		sb := account(t, l.ub, l.b, &ab, n)
		sa := account(t, l.ua, l.a, &ba, n)
		if w := l.wire.Stats(); w.Carried != 2*n || w.Dropped+w.NotModeled != 0 {
			t.Errorf("wire %+v", w)
		}
		for _, s := range []model.RcvStats{sa, sb} {
			if s.HdrqFull == 0 || s.EgrFull == 0 || s.Eager < n/3 {
				t.Errorf("the run did not exercise back-pressure: %+v", s)
			}
		}
		t.Logf("A→B %+v; B→A %+v", sb, sa)
	})
}

// The same, with each context driven by its own goroutine (its PIO sender
// and its receiver, as one owner does), so that the two units' send and
// receive sides run concurrently under the race detector.
func TestBackToBackConcurrent(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, b2bConfig)
		const n = 3000
		var ab, ba peerEnd
		var wg sync.WaitGroup
		run := func(self, peer *Context, seen *peerEnd, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			hdr := make([]byte, abi.Header9BSize)
			for seq := range uint32(n) {
				size := b2bSize(seq)
				kdethHeader(hdr, self, peer, seq, size)
				sendPIO(t, self, 0, hdr, pattern(size, byte(seq)))
				if rng.IntN(8) == 0 {
					seen.drain(t, peer, self, rng.IntN(40))
				}
			}
		}
		wg.Add(2)
		go run(l.a, l.b, &ba, 1)
		go run(l.b, l.a, &ab, 2)
		wg.Wait()
		if t.Failed() {
			return
		}
		ab.drain(t, l.a, l.b, -1)
		ba.drain(t, l.b, l.a, -1)
		account(t, l.ub, l.b, &ab, n)
		account(t, l.ua, l.a, &ba, n)
	})
}

// Loss on the wire: packets the wire loses never reach the peer's
// counters; the rest arrive intact and in order.
func TestBackToBackLoss(t *testing.T) {
	l := newLink(t, abi.ChipWFR, b2bConfig)
	l.wire.SetDrop(func(_ *model.Unit, pkt []byte) bool { return abi.Header9B(pkt).SWData(0)%7 == 3 })
	var ab peerEnd
	const n = 700
	hdr := make([]byte, abi.Header9BSize)
	for seq := range uint32(n) {
		size := b2bSize(seq)
		kdethHeader(hdr, l.a, l.b, seq, size)
		sendPIO(t, l.a, 0, hdr, pattern(size, byte(seq)))
		ab.drain(t, l.a, l.b, -1)
	}
	lost := uint64(n / 7)
	if w := l.wire.Stats(); w.Dropped != lost || w.Carried != n-lost {
		t.Errorf("wire %+v", w)
	}
	account(t, l.ub, l.b, &ab, n-lost)
}
