package abi

import "errors"

// The OPA 16B format, which JKR (CN5000) sends and receives when the PBC
// (PBC.L2Type) and the RHF (RHFJKR.L2Type) say L2Type16B. Sources:
// [O] fi_opx_hfi1_packet.h (struct fi_opx_hfi1_stl_packet_hdr_16B, the
// 16B LRH as little-endian bit fields), [K] hfi.h (OPA_16B_* masks,
// hfi1_make_16b_hdr), [C] hfi2/user_sdma.c (16B SDMA lengths). The bit
// positions are listed in docs/hfidev.md, spec note 31.
//
// A 16B KDETH packet is the 16-byte LRH, the same 12-byte BTH and 36-byte
// KDETH as a 9B one, the payload (whole quadwords), and an 8-byte
// ICRC/tail quadword. LRH.PktLen counts 8-byte flits from the LRH through
// the tail quadword; PBC.LengthDWs counts that in dwords plus the PBC.

// Sizes of the 16B pieces.
const (
	LRH16BSize = 16
	// Header16BSize is the 16B KDETH header: 16B LRH, BTH, KDETH.
	Header16BSize = LRH16BSize + BTHSize + KDETHHeaderSize // 64
	// BTHKDETHSize is the BTH and the KDETH, which 9B and 16B share.
	BTHKDETHSize = BTHSize + KDETHHeaderSize // 48
	// Tail16BSize is the ICRC/tail quadword that ends every 16B packet:
	// LRH.PktLen and PBC.LengthDWs count it, software writes it by PIO
	// (the chip fills in the ICRC: PBC.InsertICRC) and the driver appends
	// it for SDMA.
	Tail16BSize = 8
	// FlitSize is the unit of the 16B LRH.PktLen.
	FlitSize = 8
	// PktHeader16BSize is a 16B SDMA header template: PBC and 16B header.
	PktHeader16BSize = PBCSize + Header16BSize // 72
)

// 16B LRH.L4 values ([K] hfi.h OPA_16B_L4_*). User KDETH packets are
// L4IBLocal (OPX sets 9); L4IBGlobal (a GRH follows) is refused by SDMA.
const (
	L4IBLocal  = 0x09
	L4IBGlobal = 0x0a
)

// ErrShortHeader16B is returned by Header16B.Check for a buffer shorter
// than a 16B header.
var ErrShortHeader16B = errors.New("hfi1 header: shorter than 64 bytes (16B)")

// BTHKDETH is a view of the BTH (big-endian) and KDETH (little-endian) of
// a KDETH packet, 48 bytes: the part 9B and 16B headers share, at byte 8
// of a 9B header and byte 16 of a 16B one. Accessors assume len ≥
// BTHKDETHSize.
type BTHKDETH []byte

const (
	tkdeth   = BTHSize               // KDETH dword 0
	tkdethSW = BTHSize + kdethSWOffs // software dword 0
	// kdethSWOffs is where the software dwords start in the KDETH.
	kdethSWOffs = 8
)

// BTHKDETH is the 9B header's BTH and KDETH.
func (h Header9B) BTHKDETH() BTHKDETH { return BTHKDETH(h[LRH9BSize:Header9BSize]) }

// Opcode is BTH byte 0.
func (t BTHKDETH) Opcode() uint8 { return t[0] }

// SE is BTH byte 1 bit 7.
func (t BTHKDETH) SE() bool { return t[1]&0x80 != 0 }

// MigReq is BTH byte 1 bit 6.
func (t BTHKDETH) MigReq() bool { return t[1]&0x40 != 0 }

// PadCnt is BTH byte 1 [5:4].
func (t BTHKDETH) PadCnt() uint8 { return t[1] >> 4 & 3 }

// TVer is BTH byte 1 [3:0].
func (t BTHKDETH) TVer() uint8 { return t[1] & 0xf }

// PKey is BTH bytes 2-3.
func (t BTHKDETH) PKey() uint16 { return be.Uint16(t[2:]) }

// FECN is BTH byte 4 bit 7.
func (t BTHKDETH) FECN() bool { return t[4]&0x80 != 0 }

// BECN is BTH byte 4 bit 6.
func (t BTHKDETH) BECN() bool { return t[4]&0x40 != 0 }

// QP is BTH bytes 5-7 (KDETHQPPrefix, subcontext, receive context).
func (t BTHKDETH) QP() uint32 { return be.Uint32(t[4:]) & 0xffffff }

// AckReq is BTH byte 8 bit 7.
func (t BTHKDETH) AckReq() bool { return t[8]&0x80 != 0 }

// PSN is BTH bytes 8-11 [30:0].
func (t BTHKDETH) PSN() uint32 { return be.Uint32(t[8:]) & 0x7fffffff }

func (t BTHKDETH) kdeth0() uint32 { return le.Uint32(t[tkdeth:]) }

// KDETHOffset is KDETH dword 0 [14:0].
func (t BTHKDETH) KDETHOffset() uint16 { return uint16(t.kdeth0() & 0x7fff) }

// OM is KDETH dword 0 bit 15.
func (t BTHKDETH) OM() bool { return t.kdeth0()>>15&1 != 0 }

// TID is KDETH dword 0 [25:16].
func (t BTHKDETH) TID() uint16 { return uint16(t.kdeth0() >> 16 & 0x3ff) }

// TIDCtrl is KDETH dword 0 [27:26].
func (t BTHKDETH) TIDCtrl() uint8 { return uint8(t.kdeth0() >> 26 & 3) }

// KDETHIntr is KDETH dword 0 bit 28.
func (t BTHKDETH) KDETHIntr() bool { return t.kdeth0()>>28&1 != 0 }

// SH is KDETH dword 0 bit 29.
func (t BTHKDETH) SH() bool { return t.kdeth0()>>29&1 != 0 }

// KVer is KDETH dword 0 [31:30].
func (t BTHKDETH) KVer() uint8 { return uint8(t.kdeth0() >> 30) }

// JKey is the KDETH u16 at offset 4.
func (t BTHKDETH) JKey() uint16 { return le.Uint16(t[tkdeth+4:]) }

// HCRC is the KDETH u16 at offset 6.
func (t BTHKDETH) HCRC() uint16 { return le.Uint16(t[tkdeth+6:]) }

// SWData returns software dword i (0..6).
func (t BTHKDETH) SWData(i int) uint32 { return le.Uint32(t[tkdethSW+4*i:]) }

// TIDOffset is the byte offset KDETH.Offset and OM give.
func (t BTHKDETH) TIDOffset() int {
	if t.OM() {
		return int(t.KDETHOffset()) * KDETHOMLarge
	}
	return int(t.KDETHOffset()) * KDETHOMSmall
}

// SetPSN sets BTH.AckReq and the 31-bit BTH.PSN.
func (t BTHKDETH) SetPSN(psn uint32, ackReq bool) {
	be.PutUint32(t[8:], uint32(b2u(ackReq))<<31|psn&0x7fffffff)
}

// SetSWData sets KDETH software dword i (0..6).
func (t BTHKDETH) SetSWData(i int, v uint32) { le.PutUint32(t[tkdethSW+4*i:], v) }

// SetKDETHTID sets KDETH dword 0's TID [25:16], TIDCtrl [27:26], Offset
// [14:0] and OM (15) for a packet landing at byte off of entry e, in e's
// offset unit, keeping Intr, SH and KVer.
func (t BTHKDETH) SetKDETHTID(e TIDEntry, off int) {
	unit := e.OMUnit()
	v := le.Uint32(t[tkdeth:])&^(0xfffffff) | uint32(off/unit)&0x7fff |
		uint32(b2u(unit == KDETHOMLarge))<<15 | uint32(e.Pair()&0x3ff)<<16 | uint32(e.Ctrl())<<26
	le.PutUint32(t[tkdeth:], v)
}

// BTHKDETHFields are the BTH and KDETH fields, for building them with
// Encode.
type BTHKDETHFields struct {
	Opcode        uint8
	SE, MigReq    bool
	PadCnt, TVer  uint8
	PKey          uint16
	FECN, BECN    bool
	QP            uint32 // 24 bits
	AckReq        bool
	PSN           uint32 // 31 bits
	KDETHOffset   uint16 // 15 bits
	OM            bool
	TID           uint16 // 10 bits
	TIDCtrl       uint8
	KDETHIntr, SH bool
	KVer          uint8
	JKey, HCRC    uint16
	SWData        [kdethSWDataN]uint32
}

// Encode writes the BTH and KDETH into t (at least BTHKDETHSize bytes);
// reserved bits are written as zero.
func (f *BTHKDETHFields) Encode(t BTHKDETH) {
	_ = t[BTHKDETHSize-1]
	t[0] = f.Opcode
	t[1] = uint8(b2u(f.SE))<<7 | uint8(b2u(f.MigReq))<<6 | (f.PadCnt&3)<<4 | f.TVer&0xf
	be.PutUint16(t[2:], f.PKey)
	be.PutUint32(t[4:], uint32(b2u(f.FECN))<<31|uint32(b2u(f.BECN))<<30|f.QP&0xffffff)
	be.PutUint32(t[8:], uint32(b2u(f.AckReq))<<31|f.PSN&0x7fffffff)
	le.PutUint32(t[tkdeth:], uint32(f.KDETHOffset)&0x7fff|uint32(b2u(f.OM))<<15|
		(uint32(f.TID)&0x3ff)<<16|(uint32(f.TIDCtrl)&3)<<26|uint32(b2u(f.KDETHIntr))<<28|
		uint32(b2u(f.SH))<<29|(uint32(f.KVer)&3)<<30)
	le.PutUint16(t[tkdeth+4:], f.JKey)
	le.PutUint16(t[tkdeth+6:], f.HCRC)
	for i, w := range f.SWData {
		le.PutUint32(t[tkdethSW+4*i:], w)
	}
}

// Decode returns t's fields; t must be BTHKDETHSize bytes or more.
func (t BTHKDETH) Decode() BTHKDETHFields {
	f := BTHKDETHFields{
		Opcode: t.Opcode(), SE: t.SE(), MigReq: t.MigReq(), PadCnt: t.PadCnt(), TVer: t.TVer(),
		PKey: t.PKey(), FECN: t.FECN(), BECN: t.BECN(), QP: t.QP(), AckReq: t.AckReq(), PSN: t.PSN(),
		KDETHOffset: t.KDETHOffset(), OM: t.OM(), TID: t.TID(), TIDCtrl: t.TIDCtrl(),
		KDETHIntr: t.KDETHIntr(), SH: t.SH(), KVer: t.KVer(), JKey: t.JKey(), HCRC: t.HCRC(),
	}
	for i := range f.SWData {
		f.SWData[i] = t.SWData(i)
	}
	return f
}

// Header16B is a view of a 16B KDETH header: the 16B LRH (four
// little-endian dwords), then the BTH and KDETH (BTHKDETH), 64 bytes.
// Accessors assume len ≥ Header16BSize; call Check first on untrusted
// input.
//
//	dword 0: SLID[19:0] [19:0], PktLen (flits) [30:20], BECN 31
//	dword 1: DLID[19:0] [19:0], SC [24:20], RC [27:25], FECN 28, L2 [30:29], LT 31
//	dword 2: L4 [7:0], SLID[23:20] [11:8], DLID[23:20] [15:12], P_Key [31:16]
//	dword 3: Entropy [15:0], Age [18:16], CSpec [23:19], reserved [31:24]
type Header16B []byte

// Check reports whether h is long enough to read.
func (h Header16B) Check() error {
	if len(h) < Header16BSize {
		return ErrShortHeader16B
	}
	return nil
}

func (h Header16B) dw(i int) uint32 { return le.Uint32(h[4*i:]) }

// SLID is the 24-bit source LID: dword 0 [19:0] and dword 2 [11:8].
func (h Header16B) SLID() uint32 { return h.dw(0)&0xfffff | (h.dw(2)>>8&0xf)<<20 }

// DLID is the 24-bit destination LID: dword 1 [19:0] and dword 2 [15:12].
func (h Header16B) DLID() uint32 { return h.dw(1)&0xfffff | (h.dw(2)>>12&0xf)<<20 }

// PktLen is dword 0 [30:20]: 8-byte flits from the LRH through the
// ICRC/tail quadword.
func (h Header16B) PktLen() uint16 { return uint16(h.dw(0) >> 20 & 0x7ff) }

// BECN is dword 0 bit 31.
func (h Header16B) BECN() bool { return h.dw(0)>>31 != 0 }

// SC is dword 1 [24:20], the 5-bit service channel.
func (h Header16B) SC() uint8 { return uint8(h.dw(1) >> 20 & 0x1f) }

// RC is dword 1 [27:25], route control.
func (h Header16B) RC() uint8 { return uint8(h.dw(1) >> 25 & 7) }

// FECN is dword 1 bit 28.
func (h Header16B) FECN() bool { return h.dw(1)>>28&1 != 0 }

// L2 is dword 1 [30:29]: L2Type16B in every 16B header.
func (h Header16B) L2() uint8 { return uint8(h.dw(1) >> 29 & 3) }

// LT is dword 1 bit 31 (OPX's lt, which it sends as 0).
func (h Header16B) LT() bool { return h.dw(1)>>31 != 0 }

// L4 is dword 2 [7:0]: what follows the LRH (L4IBLocal: a BTH).
func (h Header16B) L4() uint8 { return uint8(h.dw(2)) }

// LRHPKey is dword 2 [31:16], the LRH's P_Key (the BTH has its own).
func (h Header16B) LRHPKey() uint16 { return uint16(h.dw(2) >> 16) }

// Entropy is dword 3 [15:0].
func (h Header16B) Entropy() uint16 { return uint16(h.dw(3)) }

// Age is dword 3 [18:16].
func (h Header16B) Age() uint8 { return uint8(h.dw(3) >> 16 & 7) }

// CSpec is dword 3 [23:19].
func (h Header16B) CSpec() uint8 { return uint8(h.dw(3) >> 19 & 0x1f) }

// BTHKDETH is the BTH and KDETH after the 16-byte LRH.
func (h Header16B) BTHKDETH() BTHKDETH { return BTHKDETH(h[LRH16BSize:Header16BSize]) }

// SetPktLen sets dword 0 [30:20] to flits, keeping the other bits.
func (h Header16B) SetPktLen(flits uint16) {
	le.PutUint32(h[0:], h.dw(0)&^(0x7ff<<20)|uint32(flits&0x7ff)<<20)
}

// Header16BFields are a 16B header's fields, for building one with Encode.
type Header16BFields struct {
	SLID, DLID uint32 // 24 bits
	PktLen     uint16 // flits, 11 bits
	BECN, FECN bool   // the LRH's (the BTH's are in BTHKDETH)
	SC, RC     uint8
	L2         uint8 // L2Type16B
	LT         bool
	L4         uint8
	LRHPKey    uint16
	Entropy    uint16
	Age, CSpec uint8
	BTHKDETH   BTHKDETHFields
}

// Encode writes the header into h, which must be at least Header16BSize
// bytes; reserved bits are written as zero.
func (f *Header16BFields) Encode(h Header16B) {
	_ = h[Header16BSize-1]
	le.PutUint32(h[0:], f.SLID&0xfffff|uint32(f.PktLen&0x7ff)<<20|uint32(b2u(f.BECN))<<31)
	le.PutUint32(h[4:], f.DLID&0xfffff|uint32(f.SC&0x1f)<<20|uint32(f.RC&7)<<25|
		uint32(b2u(f.FECN))<<28|uint32(f.L2&3)<<29|uint32(b2u(f.LT))<<31)
	le.PutUint32(h[8:], uint32(f.L4)|(f.SLID>>20&0xf)<<8|(f.DLID>>20&0xf)<<12|uint32(f.LRHPKey)<<16)
	le.PutUint32(h[12:], uint32(f.Entropy)|uint32(f.Age&7)<<16|uint32(f.CSpec&0x1f)<<19)
	f.BTHKDETH.Encode(h.BTHKDETH())
}

// Decode returns h's fields; h must pass Check.
func (h Header16B) Decode() Header16BFields {
	return Header16BFields{
		SLID: h.SLID(), DLID: h.DLID(), PktLen: h.PktLen(), BECN: h.BECN(), FECN: h.FECN(),
		SC: h.SC(), RC: h.RC(), L2: h.L2(), LT: h.LT(), L4: h.L4(), LRHPKey: h.LRHPKey(),
		Entropy: h.Entropy(), Age: h.Age(), CSpec: h.CSpec(), BTHKDETH: h.BTHKDETH().Decode(),
	}
}

// PktLen16B is LRH.PktLen, in flits, of a 16B KDETH packet carrying n
// payload bytes (a multiple of 8): header, payload and tail quadword.
func PktLen16B(n int) uint16 { return uint16((Header16BSize + n + Tail16BSize) / FlitSize) }
