package hfidev

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

type capture struct {
	pkts [][]byte
}

func (c *capture) egress(_ uint16, pkt []byte) { c.pkts = append(c.pkts, bytes.Clone(pkt)) }

func pioContext(t *testing.T, mut func(*model.Config)) (*model.Unit, *Context, *capture) {
	t.Helper()
	cfg := model.DefaultConfig(abi.ChipWFR)
	if mut != nil {
		mut(&cfg)
	}
	u := newModel(t, cfg)
	cap := &capture{}
	u.SetEgress(cap.egress)
	c, err := OpenContext(u, u.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return u, c, cap
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// hfi1-abi.md §2 "Writing a packet": block 0 = PBC + 56 bytes to SOP, the
// rest to non-SOP; LengthDWs = (8+hdr+payload)/4.
func TestPIOSendOneAndMany(t *testing.T) {
	_, c, cap := pioContext(t, nil)
	p := c.PIO()
	hdr := pattern(abi.Header9BSize, 1)
	for _, size := range []int{0, 4, 8, 64, 1000, 4096, 8192} {
		payload := pattern(size, byte(size))
		pbc := (&abi.PBCFields{VL: 2, CreditReturn: true}).Encode(abi.ChipWFR)
		if err := p.Send(pbc, hdr, payload); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		got := cap.pkts[len(cap.pkts)-1]
		gp := abi.PBC(le.Uint64(got))
		if int(gp.LengthDWs()) != (8+56+size)/4 || gp.VL() != 2 || !gp.CreditReturn() {
			t.Errorf("%d bytes: PBC %+v", size, gp.Decode(abi.ChipWFR))
		}
		if !bytes.Equal(got[8:], append(bytes.Clone(hdr), payload...)) {
			t.Errorf("%d bytes: packet body differs", size)
		}
		// PBC.CR makes the chip return the credits right away.
		if p.Avail() != c.Info.Credits || !p.CreditReturn().Decode().DueToPBC {
			t.Errorf("%d bytes: avail %d, word %+v", size, p.Avail(), p.CreditReturn().Decode())
		}
	}
	if err := p.Send(0, nil, nil); !errors.Is(err, ErrPacketLength) {
		t.Errorf("PBC alone: %v", err)
	}
	if err := p.Send(0, hdr, []byte{1, 2}); !errors.Is(err, ErrPacketLength) {
		t.Errorf("odd length: %v", err)
	}
	if err := p.Send(0, hdr, make([]byte, int(c.Info.Credits)*64)); !errors.Is(err, ErrPacketLength) {
		t.Errorf("larger than the context: %v", err)
	}
}

// Blocks wrap at credits, and the 11-bit counters wrap at 2048: thousands of
// packets of odd block counts all arrive intact.
func TestPIOWrap(t *testing.T) {
	_, c, cap := pioContext(t, func(cfg *model.Config) { cfg.Credits = 37 })
	p := c.PIO()
	hdr := pattern(56, 9)
	total := 0
	for i := range 3000 {
		payload := pattern(4*(i%250), byte(i))
		pbc := (&abi.PBCFields{CreditReturn: i%3 == 0}).Encode(abi.ChipWFR)
		err := p.Send(pbc, hdr, payload)
		if errors.Is(err, ErrNoCredits) {
			if err := c.CreditUpdate(); err != nil {
				t.Fatal(err)
			}
			err = p.Send(pbc, hdr, payload)
		}
		if err != nil {
			t.Fatalf("packet %d: %v (avail %d)", i, err, p.Avail())
		}
		total += abi.PIOBlocks(56 + len(payload))
		got := cap.pkts[len(cap.pkts)-1]
		if !bytes.Equal(got[8:], append(bytes.Clone(hdr), payload...)) {
			t.Fatalf("packet %d corrupted", i)
		}
	}
	if total < 3*2048 {
		t.Fatalf("only %d blocks: the 11-bit wrap was not exercised", total)
	}
	if err := c.CreditUpdate(); err != nil {
		t.Fatal(err)
	}
	if p.CreditReturn().FreeCounter() != uint16(total%2048) || p.Avail() != 37 {
		t.Errorf("after %d blocks: FreeCounter %d, avail %d", total, p.CreditReturn().FreeCounter(), p.Avail())
	}
}

// hfi1-abi.md §2 "Credit accounting": without PBC.CR the word moves only at
// the threshold or on CREDIT_UPD, so a sender runs out.
func TestPIOCreditExhaustion(t *testing.T) {
	_, c, cap := pioContext(t, func(cfg *model.Config) { cfg.CreditThreshold = 1000 })
	p := c.PIO()
	hdr := pattern(56, 3)
	payload := pattern(64*4-8-56, 4) // exactly 4 blocks with PBC and header
	sent := 0
	for {
		err := p.Send(0, hdr, payload)
		if errors.Is(err, ErrNoCredits) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent++
	}
	if sent != int(c.Info.Credits)/4 || len(cap.pkts) != sent || p.Avail() != c.Info.Credits%4 {
		t.Errorf("sent %d (chip saw %d), avail %d", sent, len(cap.pkts), p.Avail())
	}
	if p.CreditReturn() != 0 {
		t.Errorf("word moved without a reason: %+v", p.CreditReturn().Decode())
	}
	if err := c.CreditUpdate(); err != nil {
		t.Fatal(err)
	}
	w := p.CreditReturn().Decode()
	if !w.DueToForce || p.Avail() != c.Info.Credits {
		t.Errorf("after CREDIT_UPD: %+v, avail %d", w, p.Avail())
	}
	if err := p.Send(0, hdr, payload); err != nil {
		t.Errorf("send after CREDIT_UPD: %v", err)
	}
}

func TestPIOThreshold(t *testing.T) {
	_, c, _ := pioContext(t, nil) // 161 credits, threshold 33% = 53 blocks
	p := c.PIO()
	hdr := pattern(56, 3)
	for i := 0; i < 52; i++ {
		if err := p.Send(0, hdr, nil); err != nil {
			t.Fatal(err)
		}
	}
	if p.CreditReturn() != 0 {
		t.Fatalf("word written below the threshold: %+v", p.CreditReturn().Decode())
	}
	if err := p.Send(0, hdr, nil); err != nil {
		t.Fatal(err)
	}
	if w := p.CreditReturn().Decode(); !w.DueToThreshold || w.FreeCounter != 53 {
		t.Errorf("at the threshold: %+v", w)
	}
}

// A protocol error halts the context (Status bit); sends fail with
// ErrHalted until CTXT_RESET, which is ENOLCK on a running context.
func TestPIOHaltAndReset(t *testing.T) {
	_, c, cap := pioContext(t, nil)
	p := c.PIO()
	if err := c.Reset(); !errors.Is(err, unix.ENOLCK) {
		t.Errorf("reset of a running context: %v", err)
	}
	hdr := pattern(56, 5)
	if err := p.Send(0, hdr, nil); err != nil {
		t.Fatal(err)
	}
	// A non-SOP block with no packet open.
	var blk [8]uint64
	c.Region(abi.MmapPIOBufs).Region.StoreBlock(64, &blk)
	w := p.CreditReturn().Decode()
	if !w.Halted || !w.DueToErr {
		t.Fatalf("not halted: %+v", w)
	}
	if err := p.Send(0, hdr, nil); !errors.Is(err, ErrHalted) {
		t.Errorf("send on a halted context: %v", err)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if w := p.CreditReturn().Decode(); w.Halted || w.FreeCounter != 0 || p.Avail() != c.Info.Credits {
		t.Errorf("after reset: %+v, avail %d", w, p.Avail())
	}
	if err := p.Send(0, hdr, pattern(200, 1)); err != nil {
		t.Fatal(err)
	}
	if len(cap.pkts) != 2 {
		t.Errorf("%d packets out", len(cap.pkts))
	}
}

func TestPIOHaltCauses(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(c *Context)
	}{
		{"SOP at the wrong index", func(c *Context) {
			blk := [8]uint64{uint64(abi.PBC(16))}
			c.Region(abi.MmapPIOBufsSOP).Region.StoreBlock(128, &blk)
		}},
		{"PBC longer than the context", func(c *Context) {
			blk := [8]uint64{uint64(abi.PBC(abi.PBCMaxLengthDWs))}
			c.Region(abi.MmapPIOBufsSOP).Region.StoreBlock(0, &blk)
		}},
		{"PBC of zero length", func(c *Context) {
			var blk [8]uint64
			c.Region(abi.MmapPIOBufsSOP).Region.StoreBlock(0, &blk)
		}},
		{"SOP inside a packet", func(c *Context) {
			blk := [8]uint64{uint64(abi.PBC(32))} // two blocks
			sop := c.Region(abi.MmapPIOBufsSOP).Region
			sop.StoreBlock(0, &blk)
			sop.StoreBlock(64, &blk)
		}},
		{"word stores complete a block too", func(c *Context) {
			r := c.Region(abi.MmapPIOBufs).Region
			for i := range 8 {
				r.Store64(8*i, 0)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, ctx, cap := pioContext(t, nil)
			c.write(ctx)
			if !ctx.PIO().CreditReturn().Halted() || len(cap.pkts) != 0 {
				t.Errorf("word %+v, %d packets", ctx.PIO().CreditReturn().Decode(), len(cap.pkts))
			}
		})
	}
}

func TestPIOSendNoAlloc(t *testing.T) {
	u, c, _ := pioContext(t, nil)
	u.SetEgress(func(uint16, []byte) {})
	p := c.PIO()
	hdr := pattern(56, 1)
	payload := pattern(2048, 2)
	pbc := (&abi.PBCFields{CreditReturn: true}).Encode(abi.ChipWFR)
	allocs := testing.AllocsPerRun(200, func() {
		if err := p.Send(pbc, hdr, payload); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Send allocates %.1f times per packet (model included)", allocs)
	}
}

func BenchmarkPIOSend(b *testing.B) {
	u, err := model.NewUnit(model.DefaultConfig(abi.ChipWFR))
	if err != nil {
		b.Fatal(err)
	}
	c, err := OpenContext(u, u.Path(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := c.PIO()
	hdr := pattern(56, 1)
	payload := pattern(1024, 2)
	pbc := (&abi.PBCFields{CreditReturn: true}).Encode(abi.ChipWFR)
	b.SetBytes(int64(len(hdr) + len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Send(pbc, hdr, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// A block half-written before a halt does not complete after CTXT_RESET.
func TestPIOResetForgetsPartialBlocks(t *testing.T) {
	_, c, cap := pioContext(t, nil)
	p := c.PIO()
	sop := c.Region(abi.MmapPIOBufsSOP).Region
	for i := 1; i < 8; i++ { // words 1..7 of block 0; word 0 (the PBC) never comes
		sop.Store64(8*i, 0)
	}
	var blk [8]uint64
	c.Region(abi.MmapPIOBufs).Region.StoreBlock(0, &blk) // halts
	if !p.CreditReturn().Halted() {
		t.Fatal("not halted")
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	sop.Store64(0, uint64(abi.PBC(16))) // alone it must not complete block 0
	if p.CreditReturn().Halted() || len(cap.pkts) != 0 {
		t.Fatalf("stale words completed a block: %+v, %d packets", p.CreditReturn().Decode(), len(cap.pkts))
	}
}
