package model

import (
	"sync/atomic"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// IngressStats counts packets arriving at a unit from its link, by fate.
// A packet is counted once: delivered to a context (then see RcvStats) or
// dropped under the first check it fails.
type IngressStats struct {
	Received  uint64 // every packet Ingress was given
	Delivered uint64 // handed to a receive context
	Malformed uint64 // shorter than a 9B KDETH header (16B: header and tail), not whole dwords, or longer than a packet can be; 16B: LRH.L2 not 16B
	NotLocal  uint64 // LRH.DLID is not the unit's LID
	NotKDETH  uint64 // GRH (LNH 3), a non-KDETH opcode or QP, or KDETH.KVer ≠ 1: no kernel context is modeled
	NoContext uint64 // BTH.QP names no context in use
	JKey      uint64 // KDETH.JKey differs from the receiving context's
	Disabled  uint64 // the context is disabled: frozen by a link down, until its CTXT_RESET
	// Bypass is 16B packets that reached a WFR unit (Ingress16B): WFR
	// takes 16B as bypass packets and steers them to the one context
	// RcvBypass names, the kernel's ([K] chip.c, driver.c
	// hfi1_setup_bypass_packet), never a user context. Dropped.
	Bypass uint64
}

type ingressDrops struct {
	received, delivered, malformed, notLocal, notKDETH, noContext, jkey, disabled, bypass atomic.Uint64
}

// Ingress takes one 9B packet as it arrives from the link: the LRH through
// the end of the payload, without the PBC (which never leaves the sender)
// and without the ICRC (which the model neither computes nor checks). The
// checks, in order: length; LRH.DLID is the unit's LID; LNH is IB local
// (no GRH), BTH.Opcode&0xC0 == 0xC0 ([K] hfi.h), BTH.QP[23:16] is the
// KDETH prefix, KDETH.KVer is 1; BTH.QP[7:0] names a context in use; its
// JKey matches. The receive context then writes the entry (see RcvStats).
// pkt is only read during the call.
func (u *Unit) Ingress(pkt []byte) { u.ingress(pkt, 0) }

// ingress is Ingress with fault: RHF error bits the wire adds (SetFault).
func (u *Unit) ingress(pkt []byte, fault uint64) {
	d := &u.drops
	d.received.Add(1)
	h := abi.Header9B(pkt)
	if h.Check() != nil || len(pkt)%4 != 0 || len(pkt)+abi.PBCSize > abi.PBCMaxLengthDWs*4 ||
		len(pkt)-abi.Header9BSize+abi.ICRCSize > int(u.cfg.RcvEgrSize) {
		d.malformed.Add(1)
		return
	}
	if h.DLID() != u.LID() {
		d.notLocal.Add(1)
		return
	}
	if h.LNH() != abi.LNHIBLocal {
		d.notKDETH.Add(1)
		return
	}
	u.route(h.BTHKDETH(), pkt, &format9B, fault)
}

// route is the checks after the LRH's, the same for 9B and 16B packets
// (Ingress, Ingress16B): a KDETH opcode, QP prefix and version, a context
// in use and enabled, its JKey; then the context writes pkt as format fm.
func (u *Unit) route(h abi.BTHKDETH, pkt []byte, fm *rcvFormat, fault uint64) {
	d := &u.drops
	qp := h.QP()
	if h.Opcode()&0xc0 != 0xc0 || qp>>16 != abi.KDETHQPPrefix || h.KVer() != abi.KDETHVersion {
		d.notKDETH.Add(1)
		return
	}
	idx := int(qp&0xff) - u.cfg.FirstUserCtxt
	if idx < 0 || idx >= len(u.rcv) {
		d.noContext.Add(1)
		return
	}
	r := u.rcv[idx].Load()
	if r == nil {
		d.noContext.Add(1)
		return
	}
	if u.rcvOff[idx].Load() {
		d.disabled.Add(1)
		return
	}
	if h.JKey() != u.cfg.JKey {
		d.jkey.Add(1)
		return
	}
	d.delivered.Add(1)
	r.deliver(pkt, fm, fault)
}

// IngressStats returns the unit's ingress counters.
func (u *Unit) IngressStats() IngressStats {
	d := &u.drops
	return IngressStats{
		Received: d.received.Load(), Delivered: d.delivered.Load(), Malformed: d.malformed.Load(),
		NotLocal: d.notLocal.Load(), NotKDETH: d.notKDETH.Load(), NoContext: d.noContext.Load(),
		JKey: d.jkey.Load(), Disabled: d.disabled.Load(), Bypass: d.bypass.Load(),
	}
}

// RcvStats returns the receive counters of hardware context ctxt; false if
// no context with that number is in use.
func (u *Unit) RcvStats(ctxt uint16) (RcvStats, bool) {
	idx := int(ctxt) - u.cfg.FirstUserCtxt
	if idx < 0 || idx >= len(u.rcv) {
		return RcvStats{}, false
	}
	r := u.rcv[idx].Load()
	if r == nil {
		return RcvStats{}, false
	}
	return r.snapshot(), true
}
