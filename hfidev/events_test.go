package hfidev

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// A link down seen through the API, on both chips, with and without
// DMA_RTAIL: the status page says the link is down, the event word has
// FROZEN and LINKDOWN, PIO reports the halt and SDMA ECOMM; Reset
// acknowledges FROZEN and restarts the receiver with the chip's queue (the
// packets not yet polled are lost), AckEvents clears LINKDOWN; once the
// link is up both directions carry packets byte-exact again, the receive
// queue wrapping its RcvSeq from the restart.
func TestLinkDownEvents(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, rtail := range []bool{false, true} {
			t.Run(fmt.Sprintf("rtail=%v", rtail), func(t *testing.T) {
				linkDownOnce(t, chip, rtail)
			})
		}
	})
}

func linkDownOnce(t *testing.T, chip abi.Chip, rtail bool) {
	l := newLink(t, chip, func(c *model.Config) {
		c.RcvHdrqCnt = 32
		if rtail {
			c.Caps |= abi.CapDMARtail
		}
	})
	ready := abi.StatusIBReady | abi.StatusIBConf
	if s := l.b.Status(); !l.b.LinkUp() || s.Port&ready != ready || s.Dev&abi.StatusChipPresent == 0 {
		t.Fatalf("status %+v at start", s)
	}
	var e peerEnd
	seq := uint32(0)
	for range 5 { // left in B's queue: lost at the restart
		l.send(t, l.a, l.b, seq, b2bSize(seq))
		seq++
	}
	e.drain(t, l.a, l.b, 2)

	l.wire.SetLinkUp(false)
	if s := l.b.Status(); l.b.LinkUp() || s.Port&ready != 0 {
		t.Errorf("status %+v with the link down", s)
	}
	for _, c := range []*Context{l.a, l.b} {
		if ev := c.Events(); ev != abi.EventFrozen|abi.EventLinkDown {
			t.Errorf("ctxt %d: events %#x", c.Info.Ctxt, ev)
		}
	}
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, l.a, l.b, seq, 8)
	if err := l.a.PIO().Send(0, hdr, pattern(8, 0)); !errors.Is(err, ErrHalted) {
		t.Errorf("PIO on a frozen context: %v", err)
	}
	if _, err := l.a.SDMA().Submit((&abi.PBCFields{}).Encode(chip), hdr, 4096, nil); !errors.Is(err, unix.ECOMM) {
		t.Errorf("SDMA with the link down: %v", err)
	}
	for _, c := range []*Context{l.a, l.b} {
		if err := c.Reset(); err != nil {
			t.Fatal(err)
		}
		if ev := c.Events(); ev != abi.EventLinkDown {
			t.Errorf("ctxt %d: events %#x after Reset", c.Info.Ctxt, ev)
		}
		if err := c.AckEvents(abi.EventLinkDown); err != nil {
			t.Fatal(err)
		}
		if ev := c.Events(); ev != 0 {
			t.Errorf("ctxt %d: events %#x after AckEvents", c.Info.Ctxt, ev)
		}
	}
	if err := l.b.Reset(); !errors.Is(err, unix.ENOLCK) {
		t.Errorf("second Reset: %v, want ENOLCK", err)
	}
	// Reset while the link is still down: sending works, the wire drops.
	sendPIO(t, l.a, 0, hdr, pattern(8, 0))
	if _, ok := l.b.Receiver().Poll(); ok {
		t.Fatal("a packet crossed a link that is down (or survived the restart)")
	}
	if s := l.wire.Stats(); s.LinkDown != 1 {
		t.Errorf("wire %+v", s)
	}

	l.wire.SetLinkUp(true)
	if !l.a.LinkUp() || l.a.Events() != 0 {
		t.Errorf("after link up: up %v, events %#x", l.a.LinkUp(), l.a.Events())
	}
	e.next = seq
	for range 40 { // past 13 RcvSeq and the 32-entry queue
		l.send(t, l.a, l.b, seq, b2bSize(seq))
		seq++
		e.drain(t, l.a, l.b, -1)
	}
	if e.ok != 2+40 {
		t.Errorf("%d packets delivered whole, want 42", e.ok)
	}
	// And the other way.
	hdr2 := make([]byte, abi.Header9BSize)
	kdethHeader(hdr2, l.b, l.a, 1, 300)
	sendPIO(t, l.b, 0, hdr2, pattern(300, 9))
	p, ok := l.a.Receiver().Poll()
	if !ok || p.Err != nil || !bytes.Equal(p.Payload, pattern(300, 9)) {
		t.Fatalf("B to A after the link came back: %v %+v", ok, p)
	}
}

// Packets damaged on the wire (model.Wire.SetFault) arrive as
// ErrRcvHeader with the chip's bits: RHF.IcrcErr / EccErr / LenErr on
// WFR, the RHE's on JKR (RHF.RheValid); the header and payload are where
// a good packet's would be, the payload as damaged. A FaultDrop never
// arrives. The packets around them are untouched.
func TestRecvInjectedErrors(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, nil)
		r := l.b.Receiver()
		var next model.Fault
		l.wire.SetFault(func(*model.Unit, []byte) model.Fault { f := next; next = model.FaultNone; return f })
		for i, c := range []struct {
			fault    model.Fault
			rhf, rhe uint64
		}{
			{model.FaultICRC, abi.RHFICRCErr, abi.RHEICRCErr},
			{model.FaultECC, abi.RHFECCErr, abi.RHEECCErr},
			{model.FaultLen, abi.RHFLenErr, abi.RHELenErr},
			{model.FaultDrop, 0, 0},
		} {
			seq := uint32(10 * i)
			next = c.fault
			_, payload := l.send(t, l.a, l.b, seq, 100)
			l.send(t, l.a, l.b, seq+1, 100)
			p, ok := r.Poll()
			if !ok {
				t.Fatalf("%d: nothing received", c.fault)
			}
			if c.fault == model.FaultDrop {
				if p.Header.SWData(0) != seq+1 || p.Err != nil {
					t.Errorf("drop: got seq %d, %v", p.Header.SWData(0), p.Err)
				}
				r.Release()
				continue
			}
			var bits bool
			if chip == abi.ChipWFR {
				bits = p.RHF&abi.RHFErrMask == c.rhf && p.RHE == 0
			} else {
				bits = p.Fields.RHEValid && uint64(p.RHE) == c.rhe && p.Fields.Errors == 0
			}
			if !errors.Is(p.Err, ErrRcvHeader) || !bits || p.Header.SWData(0) != seq {
				t.Errorf("fault %d: err %v RHF %#x RHE %#x seq %d", c.fault, p.Err, p.RHF, uint64(p.RHE), p.Header.SWData(0))
			}
			want := bytes.Clone(payload)
			switch c.fault {
			case model.FaultLen:
				want = append(want, 0, 0, 0, 0) // the extra dword
			default:
				want[len(want)-1] ^= 0xff
			}
			if !bytes.Equal(p.Payload, want) {
				t.Errorf("fault %d: payload % x…", c.fault, p.Payload[max(0, len(p.Payload)-6):])
			}
			r.Release()
			p, ok = r.Poll()
			if !ok || p.Err != nil || p.Header.SWData(0) != seq+1 || !bytes.Equal(p.Payload, pattern(100, byte(seq+1))) {
				t.Fatalf("fault %d: the next packet: %v %+v", c.fault, ok, p)
			}
			r.Release()
		}
		if s := l.wire.Stats(); s.ICRC != 1 || s.ECC != 1 || s.Len != 1 || s.Dropped != 1 {
			t.Errorf("wire %+v", s)
		}
	})
}

// A damaged packet's payload still takes an eager buffer: releasing it
// gives the buffer back, so a long run of damaged packets never leaves
// the chip without eager space (nothing dropped as eager-full).
func TestRecvDamagedReleasesEager(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, func(c *model.Config) { c.EgrTIDs, c.RcvEgrSize, c.Credits = 8, 2*abi.PageSize, 100 })
		r := l.b.Receiver()
		l.wire.SetFault(func(*model.Unit, []byte) model.Fault { return model.FaultICRC })
		for i := range 40 {
			l.send(t, l.a, l.b, uint32(i), 5000) // over half a buffer: one each
			p, ok := r.Poll()
			if !ok || !errors.Is(p.Err, ErrRcvHeader) {
				t.Fatalf("packet %d: %v, %v", i, ok, p)
			}
			r.Release()
		}
		if s, _ := l.ub.RcvStats(l.b.Info.Ctxt); s.EgrFull != 0 {
			t.Fatalf("receive stats %+v: eager buffers not given back", s)
		}
	})
}
