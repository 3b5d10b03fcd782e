package hfidev

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// link is two modeled units joined by a wire, one context open on each.
type link struct {
	ua, ub *model.Unit
	a, b   *Context
	wire   *model.Wire
}

func newLink(tb testing.TB, chip abi.Chip, mut func(*model.Config)) *link {
	tb.Helper()
	var l link
	for i, u := range []**model.Unit{&l.ua, &l.ub} {
		cfg := model.DefaultConfig(chip)
		cfg.Unit, cfg.LID = i, uint16(i+1)
		if mut != nil {
			mut(&cfg)
		}
		var err error
		if *u, err = model.NewUnit(cfg); err != nil {
			tb.Fatal(err)
		}
	}
	l.wire = model.Connect(l.ua, l.ub)
	for _, p := range []struct {
		u *model.Unit
		c **Context
	}{{l.ua, &l.a}, {l.ub, &l.b}} {
		c, err := OpenContext(p.u, p.u.Path(), Options{})
		if err != nil {
			tb.Fatal(err)
		}
		*p.c = c
		tb.Cleanup(func() { c.Close() })
	}
	return &l
}

// lid is the LID of the unit behind c in a link (unit N has LID N+1).
func lid(c *Context) uint16 { return c.Info.Unit + 1 }

// kdethHeader writes a 9B KDETH header for a packet of n payload bytes to
// context to: SWData[0] carries seq, SWData[1] the length.
func kdethHeader(h []byte, from, to *Context, seq uint32, n int) {
	f := abi.Header9BFields{
		LNH: abi.LNHIBLocal, DLID: lid(to), SLID: lid(from),
		PktLen: uint16((abi.Header9BSize+n)/4 + 1),
		BTHKDETHFields: abi.BTHKDETHFields{Opcode: 0xc0, PKey: 0xffff, QP: abi.KDETHQPPrefix<<16 | uint32(to.Info.Ctxt), PSN: seq,
			KVer: abi.KDETHVersion, JKey: to.Base.JKey},
	}
	f.SWData[0], f.SWData[1] = seq, uint32(n)
	f.Encode(h)
}

// sendPIO sends one packet, forcing a credit return when credits are short.
func sendPIO(tb testing.TB, c *Context, pbc abi.PBC, hdr, payload []byte) {
	tb.Helper()
	err := c.PIO().Send(pbc, hdr, payload)
	if errors.Is(err, ErrNoCredits) {
		if err := c.CreditUpdate(); err != nil {
			tb.Fatal(err)
		}
		err = c.PIO().Send(pbc, hdr, payload)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

func (l *link) send(tb testing.TB, from, to *Context, seq uint32, n int) ([]byte, []byte) {
	tb.Helper()
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, from, to, seq, n)
	payload := pattern(n, byte(seq))
	sendPIO(tb, from, 0, hdr, payload)
	return hdr, payload
}

func rcvStats(tb testing.TB, u *model.Unit, c *Context) model.RcvStats {
	tb.Helper()
	s, ok := u.RcvStats(c.Info.Ctxt)
	if !ok {
		tb.Fatalf("no context %d", c.Info.Ctxt)
	}
	return s
}

func chips(t *testing.T, f func(t *testing.T, chip abi.Chip)) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		t.Run(chip.String(), func(t *testing.T) { f(t, chip) })
	}
}

// hfi1-abi.md §3: the header at HdrqOffset, the RHF last with RcvSeq 1..13,
// the payload at egrbase + EgrIndex×rcvegr_size + EgrOffset×64.
func TestRecvPacket(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, nil)
		r := l.b.Receiver()
		if _, ok := r.Poll(); ok {
			t.Fatal("packet in a fresh queue")
		}
		for i, n := range []int{0, 4, 8, 60, 64, 1000, 4096, 8192} {
			hdr, payload := l.send(t, l.a, l.b, uint32(i), n)
			p, ok := r.Poll()
			if !ok {
				t.Fatalf("%d bytes: nothing received", n)
			}
			f := p.Fields
			if p.Err != nil || !bytes.Equal(p.Header, hdr) || !bytes.Equal(p.Payload, payload) {
				t.Fatalf("%d bytes: err %v, header equal %v, payload %d bytes", n, p.Err, bytes.Equal(p.Header, hdr), len(p.Payload))
			}
			if f.RcvType != abi.RcvTypeEager || f.UseEgrBfr != (n > 0) || f.RcvSeq != uint8(i%13+1) ||
				f.HdrqOffset != abi.HdrqOffset9B || int(f.PktLen) != (56+n)/4+1 || p.Header.PktLen() != f.PktLen {
				t.Errorf("%d bytes: RHF %+v", n, f)
			}
			if chip == abi.ChipJKR && (f.L2Type != abi.L2Type9B || f.RHEValid) {
				t.Errorf("%d bytes: JKR RHF %+v", n, f)
			}
			if q, _ := r.Poll(); q != p {
				t.Error("a second poll before Release moved on")
			}
			r.Release()
		}
		if _, ok := r.Poll(); ok {
			t.Error("packet after draining")
		}
		if s := rcvStats(t, l.ub, l.b); s.Packets != 8 || s.Eager != 7 || s.HdrqFull+s.EgrFull+s.LenErr+s.TIDErr != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// Payloads are packed into eager buffers at 64-byte steps (CapMultiPktEgr)
// and move to the next buffer when one does not fit; without the
// capability every packet takes a buffer of its own.
func TestRecvEagerPacking(t *testing.T) {
	for _, multi := range []bool{true, false} {
		l := newLink(t, abi.ChipWFR, func(c *model.Config) {
			if !multi {
				c.Caps &^= abi.CapMultiPktEgr
			}
		})
		r := l.b.Receiver()
		egrSize := int(l.b.Info.RcvEgrSize)
		idx, off := 0, 0
		for i := range 40 {
			n := 4 + 1020*(i%7)
			l.send(t, l.a, l.b, uint32(i), n)
			p, ok := r.Poll()
			if !ok || p.Err != nil {
				t.Fatalf("packet %d: %v %v", i, ok, p.Err)
			}
			need := (n + 4 + 63) &^ 63
			if i > 0 && (!multi || off+need > egrSize) {
				idx, off = idx+1, 0
			}
			if f := p.Fields; int(f.EgrIndex) != idx || int(f.EgrOffset)*64 != off {
				t.Fatalf("multi %v packet %d (%d bytes): at %d+%d, want %d+%d", multi, i, n, f.EgrIndex, int(f.EgrOffset)*64, idx, off)
			}
			off += need
			r.Release()
		}
	}
}

// The queue holds cnt−1 entries; one more is dropped whole and counted.
// RcvSeq runs 1..13 across the queue's wrap. Head writes are lazy: entries
// released but not yet written back still count as full.
func TestRecvHdrqFullAndWrap(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		const cnt = 64
		l := newLink(t, chip, func(c *model.Config) { c.RcvHdrqCnt = cnt })
		r := l.b.Receiver()
		r.SetHeadEvery(16)
		uregs := l.b.Region(abi.MmapURegs).Region
		seq := uint32(0)
		next := uint32(0) // next seq expected at the receiver
		for round := range 5 {
			for range cnt {
				l.send(t, l.a, l.b, seq, int(seq%97)*4)
				seq++
			}
			s := rcvStats(t, l.ub, l.b)
			if want := uint64(2*round + 1); s.HdrqFull != want {
				t.Fatalf("round %d: HdrqFull %d, want %d", round, s.HdrqFull, want)
			}
			// Read 20: 16 are written back, 4 are pending.
			for range 20 {
				p, ok := r.Poll()
				if !ok || p.Err != nil || p.Header.SWData(0) != next {
					t.Fatalf("round %d: want seq %d: ok %v %+v", round, next, ok, p)
				}
				if !bytes.Equal(p.Payload, pattern(int(next%97)*4, byte(next))) {
					t.Fatalf("seq %d: payload differs", next)
				}
				next++
				r.Release()
			}
			if head := uregs.Load64(abi.URegRcvHdrHead); head == 0 || int(head)%(int(l.b.Info.RcvHdrqEntSize)/4) != 0 {
				t.Fatalf("RcvHdrHead %#x", head)
			}
			// 16 free entries: the 17th packet is dropped.
			before := rcvStats(t, l.ub, l.b).HdrqFull
			for range 17 {
				l.send(t, l.a, l.b, 1<<31, 0)
			}
			if got := rcvStats(t, l.ub, l.b).HdrqFull - before; got != 1 {
				t.Fatalf("round %d: %d dropped with 16 entries written back", round, got)
			}
			// Drain: the seq continues.
			for {
				p, ok := r.Poll()
				if !ok {
					break
				}
				if sw := p.Header.SWData(0); sw != 1<<31 {
					if sw != next {
						t.Fatalf("seq %d, want %d", sw, next)
					}
					next++
				}
				r.Release()
			}
			// The lost ones of this round are gone; realign.
			next = seq
		}
		if s := rcvStats(t, l.ub, l.b); s.Packets < 5*cnt {
			t.Errorf("stats %+v", s)
		}
	})
}

// hfi1-abi.md §3: with no eager buffer free the header is still written,
// RcvType eager, TidErr (in the RHE on JKR), and the payload is dropped.
func TestRecvEagerFull(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, func(c *model.Config) {
			c.Credits, c.EgrTIDs, c.RcvEgrSize = 64, 4, 4096
		})
		r := l.b.Receiver()
		for i := range 6 {
			l.send(t, l.a, l.b, uint32(i), 3000) // one per buffer
		}
		for i := range 6 {
			p, ok := r.Poll()
			if !ok {
				t.Fatalf("entry %d missing", i)
			}
			if i < 4 {
				if p.Err != nil || len(p.Payload) != 3000 {
					t.Fatalf("packet %d: %v", i, p.Err)
				}
			} else {
				if !errors.Is(p.Err, ErrEagerFull) || p.Payload != nil || p.Fields.UseEgrBfr ||
					p.Fields.RcvType != abi.RcvTypeEager || p.Header.SWData(0) != uint32(i) {
					t.Fatalf("packet %d: err %v fields %+v", i, p.Err, p.Fields)
				}
				if chip == abi.ChipWFR && p.RHF&abi.RHFTIDErr == 0 {
					t.Errorf("WFR RHF %#x without TidErr", p.RHF)
				}
				if chip == abi.ChipJKR && (!p.Fields.RHEValid || !p.RHE.Has(abi.RHETIDErr)) {
					t.Errorf("JKR RHF %+v RHE %#x", p.Fields, uint64(p.RHE))
				}
			}
			r.Release()
		}
		if s := rcvStats(t, l.ub, l.b); s.EgrFull != 2 || s.Eager != 4 {
			t.Errorf("stats %+v", s)
		}
		// Releasing moved RcvEgrIndexHead to buffer 3: 0..2 are free again.
		for i := range 3 {
			l.send(t, l.a, l.b, uint32(10+i), 3000)
			p, ok := r.Poll()
			if !ok || p.Err != nil || !bytes.Equal(p.Payload, pattern(3000, byte(10+i))) {
				t.Fatalf("after release, packet %d: %v", i, p.Err)
			}
			r.Release()
		}
	})
}

// With CapDMARtail the receiver compares its head with the DMA'd tail.
func TestRecvDMARtail(t *testing.T) {
	l := newLink(t, abi.ChipWFR, func(c *model.Config) { c.Caps |= abi.CapDMARtail; c.RcvHdrqCnt = 64 })
	r := l.b.Receiver()
	if r.rtail == nil {
		t.Fatal("no RTAIL mapping")
	}
	for i := range 300 {
		l.send(t, l.a, l.b, uint32(i), 4*(i%50))
		p, ok := r.Poll()
		if !ok || p.Err != nil || p.Header.SWData(0) != uint32(i) {
			t.Fatalf("packet %d: %v %v", i, ok, p)
		}
		r.Release()
		if _, ok := r.Poll(); ok {
			t.Fatalf("packet %d: a second packet", i)
		}
	}
}

// Receive errors the model produces, and the ingress checks that drop.
func TestRecvErrorsAndDrops(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, nil)
		r := l.b.Receiver()
		hdr := make([]byte, abi.Header9BSize)
		h := abi.Header9B(hdr)

		kdethHeader(hdr, l.a, l.b, 1, 64)
		hdr[5]++ // LRH.PktLen one dword too long
		sendPIO(t, l.a, 0, hdr, pattern(64, 1))
		p, ok := r.Poll()
		lenErr := (chip == abi.ChipWFR && p.RHF&abi.RHFLenErr != 0) || (chip == abi.ChipJKR && p.RHE.Has(abi.RHELenErr))
		if !ok || !errors.Is(p.Err, ErrRcvHeader) || !lenErr || !bytes.Equal(p.Payload, pattern(64, 1)) {
			t.Fatalf("length mismatch: %v %+v", ok, p)
		}
		r.Release()

		kdethHeader(hdr, l.a, l.b, 2, 128)
		f := h.Decode()
		f.TIDCtrl, f.TID = 1, 5
		f.Encode(hdr)
		sendPIO(t, l.a, 0, hdr, pattern(128, 2))
		p, ok = r.Poll()
		if !ok || !errors.Is(p.Err, ErrTID) || p.Fields.RcvType != abi.RcvTypeExpected || p.Payload != nil {
			t.Fatalf("TID packet: %v %+v", ok, p)
		}
		r.Release()

		drops := []func(f *abi.Header9BFields){
			func(f *abi.Header9BFields) { f.DLID = 99 },
			func(f *abi.Header9BFields) { f.LNH = abi.LNHIBGlobal },
			func(f *abi.Header9BFields) { f.Opcode = 0x04 },
			func(f *abi.Header9BFields) { f.QP = 0x12<<16 | uint32(l.b.Info.Ctxt) },
			func(f *abi.Header9BFields) { f.KVer = 2 },
			func(f *abi.Header9BFields) { f.QP = abi.KDETHQPPrefix<<16 | uint32(l.b.Info.Ctxt+1) },
			func(f *abi.Header9BFields) { f.QP = abi.KDETHQPPrefix << 16 }, // context 0: a kernel one
			func(f *abi.Header9BFields) { f.JKey++ },
		}
		for _, mut := range drops {
			kdethHeader(hdr, l.a, l.b, 3, 8)
			f := h.Decode()
			mut(&f)
			f.Encode(hdr)
			sendPIO(t, l.a, 0, hdr, pattern(8, 3))
		}
		if _, ok := r.Poll(); ok {
			t.Error("a bad packet was delivered")
		}
		want := model.IngressStats{Received: 10, Delivered: 2, NotLocal: 1, NotKDETH: 4, NoContext: 2, JKey: 1}
		if got := l.ub.IngressStats(); got != want {
			t.Errorf("ingress %+v, want %+v", got, want)
		}
		if s := rcvStats(t, l.ub, l.b); s.LenErr != 1 || s.TIDErr != 1 || s.Packets != 2 {
			t.Errorf("stats %+v", s)
		}
	})
}

// Polling and releasing do not allocate, empty or not.
func TestRecvAllocs(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	r := l.b.Receiver()
	for i := range 200 {
		l.send(t, l.a, l.b, uint32(i), 256)
	}
	allocs := testing.AllocsPerRun(100, func() {
		p, ok := r.Poll()
		if !ok || p.Err != nil {
			t.Fatal("queue ran dry")
		}
		r.Release()
	})
	if allocs != 0 {
		t.Errorf("Poll+Release: %v allocs", allocs)
	}
	for {
		if _, ok := r.Poll(); !ok {
			break
		}
		r.Release()
	}
	if allocs := testing.AllocsPerRun(100, func() { r.Poll() }); allocs != 0 {
		t.Errorf("empty Poll: %v allocs", allocs)
	}
}
