package hfilink_test

import (
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
)

// TestLinkDownMidTransfer: the link goes down in the middle of a 1 MiB
// RDMA READ or WRITE (some packets placed by TID, some eager) and stays
// down for 10 ms of virtual time, RC's retransmissions meanwhile lost on
// the wire; then it comes back and the operation completes byte-exact.
// The driver's events are seen by both contexts (FROZEN and LINKDOWN in
// the event word, the status page not READY) and handled by the links:
// each resets its context (the freeze halted its send context and
// disabled its receive context), restarting its receive queue, and
// acknowledges the rest, leaving the event word clear.
func TestLinkDownMidTransfer(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, op := range []verbs.Opcode{verbs.OpRead, verbs.OpWrite} {
			t.Run(op.String(), func(t *testing.T) { linkDownMidTransfer(t, chip, op) })
		}
	})
}

func linkDownMidTransfer(t *testing.T, chip abi.Chip, op verbs.Opcode) {
	const size = 1 << 20
	x := newRMA(t, hfidevice.PairConfig{Chip: chip}, op, size, 0)
	w := x.m.Wire
	// The link goes down once the data's receiver has taken in a third
	// of the data packets: the rest are in its RcvHdrQ (a READ's
	// responder sends them all at once), on their way, or still to send.
	recv := x.links()[0] // a READ's data comes to A
	if op == verbs.OpWrite {
		recv = x.links()[1]
	}
	for recv.Stats().RxFrames < uint64(x.data)/3 {
		if !x.p.Step() || x.done() {
			t.Fatal("stalled or done before the link went down")
		}
	}
	w.SetLinkUp(false)
	for _, l := range x.links() {
		c := l.Context()
		if ev := c.Events(); ev != abi.EventFrozen|abi.EventLinkDown {
			t.Errorf("ctxt %d: events %#x, want FROZEN|LINKDOWN", c.Info.Ctxt, ev)
		}
		if l.LinkUp() || c.Status().Port&abi.StatusIBReady != 0 {
			t.Errorf("ctxt %d: link up with the link down (status %+v)", c.Info.Ctxt, c.Status())
		}
	}
	down := x.p.Now
	for x.p.Now < down+int64(10*time.Millisecond) {
		if !x.p.Step() {
			t.Fatal("stalled with the link down")
		}
		if x.done() {
			t.Fatal("completed with the link down")
		}
	}
	// What was sent while down: dropped on the wire (PIO) or refused
	// by the stopped SDMA engine (ECOMM, counted by the link).
	lost := w.Stats().LinkDown
	for _, l := range x.links() {
		lost += l.Stats().TxErrors
	}
	if lost == 0 {
		t.Error("nothing was sent while the link was down")
	}
	for _, l := range x.links() {
		s := l.Stats()
		if ev := l.Context().Events(); ev != 0 {
			t.Errorf("events %#x left unacknowledged", ev)
		}
		if s.Freezes != 1 || s.LinkDowns != 1 || s.EventBits != abi.EventFrozen|abi.EventLinkDown {
			t.Errorf("link events: %d freezes, %d link downs, bits %#x", s.Freezes, s.LinkDowns, s.EventBits)
		}
	}
	w.SetLinkUp(true)
	if !x.links()[0].LinkUp() {
		t.Error("link still down")
	}
	x.finish(t)
	for i, u := range x.m.Units {
		if s := u.IngressStats(); s.Disabled != 0 {
			t.Errorf("unit %d: %d packets reached a disabled context: a link did not reset", i, s.Disabled)
		}
	}
	a, b := x.links()[0].Stats(), x.links()[1].Stats()
	t.Logf("%d packets lost while down; A: %d frames in, %d placed, %d PIO halts, %d SDMA refused; B: %d frames in, %d placed, %d PIO halts, %d SDMA refused",
		lost, a.RxFrames, a.RxPlaced, a.TxHalts, a.TxErrors, b.RxFrames, b.RxPlaced, b.TxHalts, b.TxErrors)
}

// TestInjectedErrorsRecover: the wire damages every 11th packet in turn
// with an ICRC error, an ECC error and a length error (model.SetFault);
// the receiving chip flags each one (RHF on WFR, RHE on JKR), the links
// count them in RxErrors and drop them, and RC recovers: a 1 MiB READ and
// WRITE complete byte-exact, also where a damaged payload had been placed
// by TID into the destination first.
func TestInjectedErrorsRecover(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, op := range []verbs.Opcode{verbs.OpRead, verbs.OpWrite} {
			t.Run(op.String(), func(t *testing.T) {
				x := newRMA(t, hfidevice.PairConfig{Chip: chip}, op, 1<<20, 0)
				n := 0
				kinds := [...]model.Fault{model.FaultICRC, model.FaultECC, model.FaultLen}
				x.m.Wire.SetFault(func(*model.Unit, []byte) model.Fault {
					if n++; n%11 == 0 {
						return kinds[n/11%3]
					}
					return model.FaultNone
				})
				x.finish(t)
				ws := x.m.Wire.Stats()
				var rxErrs, malformed uint64
				for i, l := range x.links() {
					rxErrs += l.Stats().RxErrors
					malformed += x.m.Units[i].IngressStats().Malformed
				}
				damaged := ws.ICRC + ws.ECC + ws.Len
				if ws.ICRC == 0 || ws.ECC == 0 || ws.Len == 0 || rxErrs+malformed != damaged {
					t.Errorf("wire %+v: %d damaged, %d receive errors + %d malformed", ws, damaged, rxErrs, malformed)
				}
				t.Logf("%d packets damaged (%d ICRC, %d ECC, %d length), all dropped by the links; %d placed by TID",
					damaged, ws.ICRC, ws.ECC, ws.Len, x.links()[0].Stats().RxPlaced+x.links()[1].Stats().RxPlaced)
			})
		}
	})
}
