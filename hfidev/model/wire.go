package model

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// Wire joins two modeled units port to port: every packet a send context
// of one emits arrives at the other's Ingress, in order, synchronously
// (the store that completes a PIO packet returns after the peer has
// written its RcvHdrQ entry). The PBC stays behind, as on a real link.
//
// The link can be taken down (SetLinkUp: both ports go down, with what
// the driver does to their contexts, and whatever either unit emits until
// it is up again is dropped), packets lost (SetDrop) or damaged on the way
// (SetFault: the receiving chip flags them).
//
// Simplifications: no switch, no link delay or credits between ports, no
// ICRC on the wire (a damaged packet is flagged, not checked). On JKR a
// packet whose PBC.L2Type is 16B arrives at the peer's Ingress16B (a WFR
// peer drops it), any other at Ingress.
type Wire struct {
	a, b  *Unit
	drop  atomic.Pointer[func(from *Unit, pkt []byte) bool]
	fault atomic.Pointer[func(from *Unit, pkt []byte) Fault]

	carried, dropped, notModeled, linkDown, icrc, ecc, length atomic.Uint64
}

// WireStats counts what a wire did.
type WireStats struct {
	Carried    uint64 // handed to the peer's Ingress (damaged ones included)
	Dropped    uint64 // taken by the SetDrop function or a FaultDrop
	NotModeled uint64 // none: 16B packets, once counted here, are carried
	LinkDown   uint64 // emitted while the link was down: dropped
	// Damaged packets carried, by Fault.
	ICRC, ECC, Len uint64
}

// Fault is what the wire does to one packet (SetFault).
type Fault uint8

// Faults.
const (
	// FaultNone: carried as sent.
	FaultNone Fault = iota
	// FaultDrop: lost, as with SetDrop.
	FaultDrop
	// FaultICRC: corrupted on the way, so that the receiving chip's ICRC
	// check fails: the last payload byte arrives inverted and the entry
	// has RHF.IcrcErr (JKR: RHE.IcrcErr, RHF.RheValid). The header and
	// the payload are written as for a good packet.
	FaultICRC
	// FaultECC: an uncorrectable ECC error in the receiving chip's
	// buffer: the last payload byte inverted, RHF.EccErr (JKR:
	// RHE.EccErr).
	FaultECC
	// FaultLen: a dword more arrives than LRH.PktLen says (a zero dword
	// after the payload); the chip sets LenErr as for any length mismatch
	// (RcvStats.LenErr).
	FaultLen
)

// faultBits are the WFR RHF error bits the receiving chip adds for f.
func (f Fault) faultBits() uint64 {
	switch f {
	case FaultICRC:
		return abi.RHFICRCErr
	case FaultECC:
		return abi.RHFECCErr
	}
	return 0
}

// Connect joins a and b, replacing both units' egress functions.
func Connect(a, b *Unit) *Wire {
	w := &Wire{a: a, b: b}
	a.SetEgress(func(_ uint16, pkt []byte) { w.carry(a, b, pkt) })
	b.SetEgress(func(_ uint16, pkt []byte) { w.carry(b, a, pkt) })
	return w
}

// SetDrop installs a loss function: a packet (PBC excluded) for which it
// returns true is lost on the wire. nil loses nothing. It is asked before
// the SetFault function, independently of it.
func (w *Wire) SetDrop(fn func(from *Unit, pkt []byte) bool) {
	if fn == nil {
		w.drop.Store(nil)
		return
	}
	w.drop.Store(&fn)
}

// SetFault installs a fault function: every packet (PBC excluded) the
// link carries is given to it, and what it returns happens to the packet
// (Fault). nil damages nothing. pkt must not be changed or kept.
func (w *Wire) SetFault(fn func(from *Unit, pkt []byte) Fault) {
	if fn == nil {
		w.fault.Store(nil)
		return
	}
	w.fault.Store(&fn)
}

// SetLinkUp takes the link down or brings it up: both ports change state
// (Unit.SetLinkUp: status page, freeze, event bits), and while the link
// is down every packet either unit emits is dropped (Stats.LinkDown).
func (w *Wire) SetLinkUp(up bool) {
	w.a.SetLinkUp(up)
	w.b.SetLinkUp(up)
}

// LinkUp reports whether both ports are up.
func (w *Wire) LinkUp() bool { return w.a.LinkUp() && w.b.LinkUp() }

func (w *Wire) carry(from, to *Unit, pkt []byte) {
	pbc := abi.PBC(binary.LittleEndian.Uint64(pkt))
	if !from.LinkUp() || !to.LinkUp() {
		w.linkDown.Add(1)
		return
	}
	body := pkt[abi.PBCSize:]
	if fn := w.drop.Load(); fn != nil && (*fn)(from, body) {
		w.dropped.Add(1)
		return
	}
	f := FaultNone
	if fn := w.fault.Load(); fn != nil {
		f = (*fn)(from, body)
	}
	switch f {
	case FaultNone:
	case FaultDrop:
		w.dropped.Add(1)
		return
	case FaultICRC, FaultECC:
		if f == FaultICRC {
			w.icrc.Add(1)
		} else {
			w.ecc.Add(1)
		}
		body = append([]byte(nil), body...)
		if len(body) > abi.Header9BSize {
			body[len(body)-1] ^= 0xff
		}
	case FaultLen:
		w.length.Add(1)
		body = append(append([]byte(nil), body...), 0, 0, 0, 0)
	default:
		f = FaultNone
	}
	w.carried.Add(1)
	if from.cfg.Chip != abi.ChipWFR && pbc.L2Type() == abi.L2Type16B {
		to.ingress16B(body, f.faultBits())
		return
	}
	to.ingress(body, f.faultBits())
}

// Stats returns the wire's counters.
func (w *Wire) Stats() WireStats {
	return WireStats{Carried: w.carried.Load(), Dropped: w.dropped.Load(), NotModeled: w.notModeled.Load(),
		LinkDown: w.linkDown.Load(), ICRC: w.icrc.Load(), ECC: w.ecc.Load(), Len: w.length.Load()}
}
