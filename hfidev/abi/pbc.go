package abi

// PBC is the 8-byte Per-Buffer Control word that opens every PIO and SDMA
// packet, little-endian in memory ([K] chip.h; [O] fi_opx_hfi1_wfr.h).
// The accessors cover the WFR layout; JKR renames the upper bits (see the
// JKR methods).
type PBC uint64

// PBC bit positions.
const (
	pbcLengthShift   = 0
	pbcLengthWidth   = 12
	pbcVLShift       = 12
	pbcVLWidth       = 4
	pbcPortShift     = 16 // JKR
	pbcL2TypeShift   = 20 // JKR
	pbcInsertICRC    = 24
	pbcCreditReturn  = 25
	pbcInsertHCRCSh  = 26
	pbcBypass        = 28 // WFR
	pbcSC4           = 30
	pbcIntr          = 31
	pbcStaticRateSh  = 32 // WFR
	pbcDLIDShift     = 32 // JKR
	pbcDLIDWidth     = 24
	pbcSendCtxtShift = 56 // JKR

	// PBCSize is the PBC's size in bytes.
	PBCSize = 8
	// PBCMaxLengthDWs is the largest LengthDWs the 12-bit field holds.
	PBCMaxLengthDWs = 1<<pbcLengthWidth - 1
)

// JKR L2 types carried in PBC.L2Type and RHF.L2Type.
const (
	L2Type16B = 2
	L2Type9B  = 3
)

// PBCFields are the PBC's fields, for building one with Encode.
type PBCFields struct {
	LengthDWs    uint16 // (8 + header + payload) / 4
	VL           uint8
	CreditReturn bool  // ask for a credit-return write when this packet leaves
	InsertHCRC   uint8 // 2 bits
	// InsertICRC is bit 24: the chip computes the ICRC of a packet that
	// is not 9B (JKR InsertNon9bIcrc, [O] fi_opx_hfi1_jkr.h; WFR
	// PBC_INSERT_BYPASS_ICRC, [K] chip.h). OPX sets it on every 16B
	// packet.
	InsertICRC bool
	SC4        bool
	Intr       bool
	// Bypass is bit 28 on WFR (PBC_PACKET_BYPASS): a 16B ("bypass")
	// packet. hfi1 disallows bypass packets on user send contexts
	// (HFI1_PKT_USER_SC_INTEGRITY, [K] hfi.h); reserved on JKR, where
	// L2Type says 16B.
	Bypass bool
	// StaticRate is StaticRateControl on WFR. On JKR the same bits hold
	// the DLID and the send context; use DLID, SendCtxt instead.
	StaticRate uint16
	// JKR only.
	PortIdx  uint8
	L2Type   uint8
	DLID     uint32 // 24 bits
	SendCtxt uint8
}

// Encode builds the PBC for chip c.
func (f *PBCFields) Encode(c Chip) PBC {
	v := put(uint64(f.LengthDWs), pbcLengthShift, pbcLengthWidth) |
		put(uint64(f.VL), pbcVLShift, pbcVLWidth) |
		b2u(f.CreditReturn)<<pbcCreditReturn |
		b2u(f.InsertICRC)<<pbcInsertICRC |
		put(uint64(f.InsertHCRC), pbcInsertHCRCSh, 2) |
		b2u(f.SC4)<<pbcSC4 | b2u(f.Intr)<<pbcIntr
	if c == ChipWFR {
		v |= put(uint64(f.StaticRate), pbcStaticRateSh, 16) | b2u(f.Bypass)<<pbcBypass
	} else {
		v |= put(uint64(f.PortIdx), pbcPortShift, 2) |
			put(uint64(f.L2Type), pbcL2TypeShift, 2) |
			put(uint64(f.DLID), pbcDLIDShift, pbcDLIDWidth) |
			put(uint64(f.SendCtxt), pbcSendCtxtShift, 8)
	}
	return PBC(v)
}

// Decode returns p's fields as chip c lays them out.
func (p PBC) Decode(c Chip) PBCFields {
	f := PBCFields{
		LengthDWs:    p.LengthDWs(),
		VL:           p.VL(),
		CreditReturn: p.CreditReturn(),
		InsertHCRC:   p.InsertHCRC(),
		InsertICRC:   p.InsertICRC(),
		SC4:          p.SC4(),
		Intr:         p.Intr(),
	}
	if c == ChipWFR {
		f.StaticRate, f.Bypass = p.StaticRateControl(), p.Bypass()
	} else {
		f.PortIdx, f.L2Type, f.DLID, f.SendCtxt = p.PortIdx(), p.L2Type(), p.DLID(), p.SendCtxt()
	}
	return f
}

// LengthDWs is [11:0]: the packet's length in dwords, PBC included.
func (p PBC) LengthDWs() uint16 { return uint16(field(uint64(p), pbcLengthShift, pbcLengthWidth)) }

// VL is [15:12].
func (p PBC) VL() uint8 { return uint8(field(uint64(p), pbcVLShift, pbcVLWidth)) }

// CreditReturn is bit 25.
func (p PBC) CreditReturn() bool { return bit(uint64(p), pbcCreditReturn) }

// InsertICRC is bit 24 (InsertNon9bIcrc on JKR, InsertBypassIcrc on WFR).
func (p PBC) InsertICRC() bool { return bit(uint64(p), pbcInsertICRC) }

// Bypass is bit 28 on WFR: PacketBypass, a 16B packet.
func (p PBC) Bypass() bool { return bit(uint64(p), pbcBypass) }

// InsertHCRC is [27:26].
func (p PBC) InsertHCRC() uint8 { return uint8(field(uint64(p), pbcInsertHCRCSh, 2)) }

// SC4 is bit 30 (DcInfo).
func (p PBC) SC4() bool { return bit(uint64(p), pbcSC4) }

// Intr is bit 31.
func (p PBC) Intr() bool { return bit(uint64(p), pbcIntr) }

// StaticRateControl is [47:32] on WFR.
func (p PBC) StaticRateControl() uint16 { return uint16(field(uint64(p), pbcStaticRateSh, 16)) }

// PortIdx is [17:16] on JKR.
func (p PBC) PortIdx() uint8 { return uint8(field(uint64(p), pbcPortShift, 2)) }

// L2Type is [21:20] on JKR: L2Type9B or L2Type16B.
func (p PBC) L2Type() uint8 { return uint8(field(uint64(p), pbcL2TypeShift, 2)) }

// DLID is [55:32] on JKR.
func (p PBC) DLID() uint32 { return uint32(field(uint64(p), pbcDLIDShift, pbcDLIDWidth)) }

// SendCtxt is [63:56] on JKR.
func (p PBC) SendCtxt() uint8 { return uint8(field(uint64(p), pbcSendCtxtShift, 8)) }

// PacketLengthDWs is PBC.LengthDWs for a packet of n bytes of header and
// payload: (8+n)/4. n must be a multiple of 4.
func PacketLengthDWs(n int) uint16 { return uint16((PBCSize + n) / 4) }

// PIOBlocks is the number of 64-byte PIO blocks (credits) a packet of n
// bytes of header and payload occupies with its PBC: ceil((8+n)/64).
func PIOBlocks(n int) int { return (PBCSize + n + PIOBlockSize - 1) / PIOBlockSize }
