package hfilink_test

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
)

// pageBuf is n bytes starting off bytes past a page boundary.
func pageBuf(n, off int) []byte {
	b := make([]byte, n+off+abi.PageSize)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (abi.PageSize - 1))
	return b[skip+off : skip+off+n : skip+off+n]
}

// TestExpectedRMA: large RDMA READs and WRITEs over two modeled units have
// their payload placed by TID straight into the destination buffer (the
// links count it), land byte for byte whatever the buffer's alignment and
// size (packets that cannot go by TID go eager), and leave no entry
// programmed once done.
func TestExpectedRMA(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, physRun := range []int{0, 1} {
			for _, op := range []verbs.Opcode{verbs.OpRead, verbs.OpWrite, verbs.OpSend} {
				for _, size := range []int{64 << 10, 300_001, 1 << 20, 5 << 20} {
					for _, off := range []int{0, 100} {
						name := fmt.Sprintf("%s/phys%d/%d@%d", op, physRun, size, off)
						t.Run(name, func(t *testing.T) { expectedOnce(t, chip, physRun, op, size, off, 0) })
					}
				}
			}
		}
	})
}

// TestExpectedUnderLoss: the same with the wire losing every 13th data
// packet (expected or eager), or every 13th packet of any kind (grants,
// requests and ACKs too): RC's recovery covers every loss, a
// retransmission goes eager, and a lost grant leaves its range to eager
// receive.
func TestExpectedUnderLoss(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, op := range []verbs.Opcode{verbs.OpRead, verbs.OpWrite, verbs.OpSend} {
			t.Run(op.String()+"/data", func(t *testing.T) { expectedOnce(t, chip, 0, op, 1<<20, 0, 13) })
			t.Run(op.String()+"/any", func(t *testing.T) { expectedOnce(t, chip, 0, op, 1<<20, 0, -13) })
		}
	})
}

// expectedOnce runs one op of size bytes between buffers off bytes past a
// page, the wire dropping every lose-th data packet (lose > 0: packets
// over 1 KiB), every -lose-th packet (lose < 0), or none.
func expectedOnce(t *testing.T, chip abi.Chip, physRun int, op verbs.Opcode, size, off, lose int) {
	expectedWith(t, hfidevice.PairConfig{Chip: chip, Model: func(c *model.Config) { c.TIDPhysRunPages = physRun }},
		op, size, off, lose)
}

// expectedWith is expectedOnce on the links cfg makes.
func expectedWith(t *testing.T, cfg hfidevice.PairConfig, op verbs.Opcode, size, off, lose int) {
	x := newRMA(t, cfg, op, size, off)
	m := x.m
	if lose != 0 {
		n := 0
		m.Wire.SetDrop(func(_ *model.Unit, pkt []byte) bool {
			if lose > 0 && len(pkt) < 1024 {
				return false
			}
			n++
			return n%max(lose, -lose) == 0
		})
	}
	x.finish(t)
	recv, send := m.Links[0][0], m.Links[1][0] // the read's data goes B → A
	if op != verbs.OpRead {                    // a write's or send's data goes A → B
		recv, send = send, recv
	}
	rs, ss := recv.Stats(), send.Stats()
	if rs.RxBadPlaced != 0 || rs.RxUnplaced != 0 && lose == 0 {
		t.Errorf("receiver dropped placed packets: %+v", rs)
	}
	// A write's or send's first packets leave before the target's grant
	// arrives: only a long one has packets left to place.
	if off == 0 && lose >= 0 && (op == verbs.OpRead || size >= 1<<20) &&
		(rs.RxPlaced == 0 || ss.TxExpected == 0 || rs.Expects == 0 || ss.GrantsRcvd == 0) {
		t.Errorf("no payload placed by TID: receiver %+v, sender %+v", rs, ss)
	}
	t.Logf("%d data packets placed for a message of %d (retransmissions included)", rs.RxPlaced, (size+4095)/4096)
	if lose == 0 {
		// Every range saw all its packets: every entry is free again.
		for i, u := range m.Units {
			ts, _ := u.TIDStats(m.Nodes[i].Ctxts[0])
			if ts.Programmed != ts.Freed {
				t.Errorf("unit %d: %d entries programmed, %d freed", i, ts.Programmed, ts.Freed)
			}
		}
	}
}

// TestExpectedInvalidated: the driver's MMU notifier takes a read's
// entries in mid-transfer (memory unmapped, as the model's InvalidateRange
// stands in for). The link ends the ranges in that buffer and frees the
// entries; the packets placed meanwhile are no range's and dropped, RC
// asks again for the rest, whose new range is placed, and the read
// completes byte for byte, every entry freed.
func TestExpectedInvalidated(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		const size = 4 << 20
		x := newRMA(t, hfidevice.PairConfig{Chip: chip}, verbs.OpRead, size, 0)
		m, p, local := x.m, x.p, x.dst
		a := m.Links[0][0]
		for a.Stats().RxPlaced < 100 {
			if !p.Step() {
				t.Fatal("stalled")
			}
		}
		if n := m.Units[0].InvalidateRange(uint64(uintptr(unsafe.Pointer(&local[0]))), size); n == 0 {
			t.Fatal("nothing to invalidate")
		}
		x.finish(t)
		s := a.Stats()
		if s.SinksInvalidated == 0 || s.RxUnplaced == 0 || s.Expects < 2 || s.RxPlaced <= 128 {
			t.Errorf("stats %+v: want a range invalidated, packets dropped and the rest placed in a new one", s)
		}
		ts, _ := m.Units[0].TIDStats(m.Nodes[0].Ctxts[0])
		if ts.Invalidated == 0 || ts.Programmed != ts.Freed {
			t.Errorf("TID counters %+v", ts)
		}
		t.Logf("%d placed, %d dropped, %d TidErr, %d ranges invalidated, %d expectations",
			s.RxPlaced, s.RxUnplaced, s.RxErrors, s.SinksInvalidated, s.Expects)
	})
}

// TestExpectedRegrant: every response of a read is lost, so the read is
// asked for again whole; the requester's link sends the same grant again,
// and the responses sent again are placed too.
func TestExpectedRegrant(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		x := newRMA(t, hfidevice.PairConfig{Chip: chip}, verbs.OpRead, 256<<10, 0)
		m := x.m
		lost := 0
		m.Wire.SetDrop(func(from *model.Unit, pkt []byte) bool {
			if from == m.Units[1] && len(pkt) > 1024 && lost < 64 {
				lost++
				return true
			}
			return false
		})
		x.finish(t)
		a, b := m.Links[0][0].Stats(), m.Links[1][0].Stats()
		if lost != 64 || a.GrantsSent < 2 || a.RxPlaced != 64 || b.TxExpected != 128 {
			t.Errorf("%d lost; requester %+v; responder %+v: want the read placed whole after its grant came again", lost, a, b)
		}
	})
}
