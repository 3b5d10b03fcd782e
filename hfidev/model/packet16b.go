package model

import "github.com/softfabric/softfabric/hfidev/abi"

// rcvFormat is what differs between 9B and 16B packets on receive: the
// header's length and place in the entry, RHF.L2Type, and the trailer the
// length counts after the payload. A 16B packet is written as a 9B one
// is: the header at HdrqOffset16B (the start of the entry), RHF.L2Type
// 16B, RHF.PktLen in dwords (tail included), the tail quadword after the
// payload in the eager buffer (zeros: the ICRC is not modeled), expected
// packets placed by their KDETH.
type rcvFormat struct {
	l2       uint8
	hdrBytes int
	hdrqOff  int // RHF.HdrqOffset, dwords
	// trailer is what RHF.PktLen counts after the payload and the eager
	// buffer gets after it: the ICRC dword (9B: the chip appends it, pkt
	// ends with the payload) or the tail quadword (16B: the sender emits
	// it, pkt ends with it).
	trailer   int
	tailInPkt bool
}

var (
	format9B  = rcvFormat{l2: abi.L2Type9B, hdrBytes: abi.Header9BSize, hdrqOff: abi.HdrqOffset9B, trailer: abi.ICRCSize}
	format16B = rcvFormat{l2: abi.L2Type16B, hdrBytes: abi.Header16BSize, hdrqOff: abi.HdrqOffset16B,
		trailer: abi.Tail16BSize, tailInPkt: true}
)

// split cuts pkt (Ingress checked its length) into header and payload and
// returns RHF.PktLen (dwords, trailer included) and whether the LRH's
// PktLen agrees with the length received.
func (fm *rcvFormat) split(pkt []byte) (hdr, payload []byte, dws int, lenOK bool) {
	hdr = pkt[:fm.hdrBytes]
	if fm.tailInPkt {
		return hdr, pkt[fm.hdrBytes : len(pkt)-fm.trailer], len(pkt) / 4,
			int(abi.Header16B(hdr).PktLen())*abi.FlitSize == len(pkt)
	}
	dws = len(pkt)/4 + fm.trailer/4
	return hdr, pkt[fm.hdrBytes:], dws, int(abi.Header9B(hdr).PktLen()) == dws
}

// bthKDETH is the header's BTH and KDETH, which end it in both formats.
func (fm *rcvFormat) bthKDETH(hdr []byte) abi.BTHKDETH {
	return abi.BTHKDETH(hdr[fm.hdrBytes-abi.BTHKDETHSize:])
}

// Ingress16B takes one 16B packet as it arrives from a JKR link: the 16B
// LRH through the ICRC/tail quadword, without the PBC. Unlike a 9B
// packet's ICRC, the tail quadword is part of what the sender emits (PIO
// software writes it, the driver appends it to SDMA packets; PBC.LengthDWs
// counts it); its contents are not modeled. The checks, in order: a WFR
// unit takes no 16B packet (IngressStats.Bypass); length (whole dwords,
// header and tail at least, LRH.L2 16B); the 24-bit LRH.DLID is the
// unit's LID; LRH.L4 is IB local (a GRH, or anything else, is not KDETH);
// then as Ingress. pkt is only read during the call.
func (u *Unit) Ingress16B(pkt []byte) { u.ingress16B(pkt, 0) }

// ingress16B is Ingress16B with fault: RHF error bits the wire adds.
func (u *Unit) ingress16B(pkt []byte, fault uint64) {
	d := &u.drops
	d.received.Add(1)
	if u.cfg.Chip == abi.ChipWFR {
		d.bypass.Add(1)
		return
	}
	h := abi.Header16B(pkt)
	if h.Check() != nil || len(pkt) < abi.Header16BSize+abi.Tail16BSize || len(pkt)%4 != 0 ||
		len(pkt)+abi.PBCSize > abi.PBCMaxLengthDWs*4 || len(pkt)-abi.Header16BSize > int(u.cfg.RcvEgrSize) ||
		h.L2() != abi.L2Type16B {
		d.malformed.Add(1)
		return
	}
	if h.DLID() != uint32(u.LID()) {
		d.notLocal.Add(1)
		return
	}
	if h.L4() != abi.L4IBLocal {
		d.notKDETH.Add(1)
		return
	}
	u.route(h.BTHKDETH(), pkt, &format16B, fault)
}
