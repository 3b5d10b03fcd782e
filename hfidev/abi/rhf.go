package abi

// RHFSize is the Receive Header Flags' size: the last 8 bytes of every
// RcvHdrQ entry, little-endian, written last by the chip.
const RHFSize = 8

// RcvType values (RHF.RcvType).
const (
	RcvTypeExpected = 0
	RcvTypeEager    = 1
	RcvTypeIB       = 2
	RcvTypeError    = 3
)

// Receive sequence numbers run 1..13 and wrap to 1; 0 never appears in a
// valid entry, so a zeroed queue reads as empty.
const (
	RcvSeqFirst = 1
	RcvSeqLast  = 13
)

// NextRcvSeq is the sequence number that follows s.
func NextRcvSeq(s uint8) uint8 {
	if s >= RcvSeqLast {
		return RcvSeqFirst
	}
	return s + 1
}

// Shared WFR/JKR RHF positions.
const (
	rhfPktLenShift   = 0
	rhfPktLenWidth   = 12
	rhfRcvTypeShift  = 12
	rhfUseEgr        = 15
	rhfEgrIndexShift = 16
	rhfEgrOffShift   = 32
	rhfEgrOffWidth   = 12
	rhfHdrqOffShift  = 44
	rhfHdrqOffWidth  = 9

	wfrEgrIndexWidth = 11
	wfrSeqShift      = 28

	jkrEgrIndexWidth = 14
	jkrKHdrLenErr    = 31
	jkrL2TypeShift   = 54
	jkrSeqShift      = 56
	jkrRHEValid      = 63
)

// WFR RHF error bits [63:53] ([K] common.h). Bit 62 is RHF_RESERVED in
// most trees and RHF_VCRC_ERR in some; RHF_ERROR_SMASK covers it either way.
const (
	RHFKHdrLenErr  uint64 = 1 << 53
	RHFDCUncErr    uint64 = 1 << 54
	RHFDCErr       uint64 = 1 << 55
	RHFRcvTypeErrS        = 56 // [58:56]
	RHFTIDErr      uint64 = 1 << 59
	RHFLenErr      uint64 = 1 << 60
	RHFECCErr      uint64 = 1 << 61
	RHFVCRCErr     uint64 = 1 << 62
	RHFICRCErr     uint64 = 1 << 63
	// RHFErrMask is RHF_ERROR_SMASK: bits 63:53, RcvTypeErr included.
	RHFErrMask uint64 = 0xffe0000000000000
)

// RHF is a WFR Receive Header Flags word ([K] common.h).
type RHF uint64

// RHFFields are an RHF's fields, for building one with Encode.
type RHFFields struct {
	PktLen     uint16 // dwords, 12 bits
	RcvType    uint8  // 3 bits
	UseEgrBfr  bool
	EgrIndex   uint16 // 11 bits on WFR, 14 on JKR
	RcvSeq     uint8  // 4 bits
	EgrOffset  uint16 // 64-byte units, 12 bits
	HdrqOffset uint16 // dwords from the entry start to the header, 9 bits
	// Errors holds the WFR error bits (RHF*Err, in place). On JKR only
	// RHFKHdrLenErr is meaningful and moves to bit 31; the rest live in
	// the RHE.
	Errors uint64
	// JKR only.
	L2Type   uint8
	RHEValid bool
}

func (f *RHFFields) common(egrWidth uint) uint64 {
	return put(uint64(f.PktLen), rhfPktLenShift, rhfPktLenWidth) |
		put(uint64(f.RcvType), rhfRcvTypeShift, 3) |
		b2u(f.UseEgrBfr)<<rhfUseEgr |
		put(uint64(f.EgrIndex), rhfEgrIndexShift, egrWidth) |
		put(uint64(f.EgrOffset), rhfEgrOffShift, rhfEgrOffWidth) |
		put(uint64(f.HdrqOffset), rhfHdrqOffShift, rhfHdrqOffWidth)
}

// EncodeWFR builds a WFR RHF.
func (f *RHFFields) EncodeWFR() RHF {
	return RHF(f.common(wfrEgrIndexWidth) | put(uint64(f.RcvSeq), wfrSeqShift, 4) |
		f.Errors&RHFErrMask)
}

// EncodeJKR builds a JKR RHF.
func (f *RHFFields) EncodeJKR() RHFJKR {
	return RHFJKR(f.common(jkrEgrIndexWidth) | put(uint64(f.RcvSeq), jkrSeqShift, 4) |
		b2u(f.Errors&RHFKHdrLenErr != 0)<<jkrKHdrLenErr |
		put(uint64(f.L2Type), jkrL2TypeShift, 2) | b2u(f.RHEValid)<<jkrRHEValid)
}

// Decode returns r's fields.
func (r RHF) Decode() RHFFields {
	return RHFFields{
		PktLen: r.PktLen(), RcvType: r.RcvType(), UseEgrBfr: r.UseEgrBfr(),
		EgrIndex: r.EgrIndex(), RcvSeq: r.RcvSeq(), EgrOffset: r.EgrOffset(),
		HdrqOffset: r.HdrqOffset(), Errors: r.Errors(),
	}
}

// PktLen is [11:0]: the packet's length in dwords.
func (r RHF) PktLen() uint16 { return uint16(field(uint64(r), rhfPktLenShift, rhfPktLenWidth)) }

// RcvType is [14:12].
func (r RHF) RcvType() uint8 { return uint8(field(uint64(r), rhfRcvTypeShift, 3)) }

// UseEgrBfr is bit 15: the payload is in an eager buffer.
func (r RHF) UseEgrBfr() bool { return bit(uint64(r), rhfUseEgr) }

// EgrIndex is [26:16].
func (r RHF) EgrIndex() uint16 {
	return uint16(field(uint64(r), rhfEgrIndexShift, wfrEgrIndexWidth))
}

// RcvSeq is [31:28].
func (r RHF) RcvSeq() uint8 { return uint8(field(uint64(r), wfrSeqShift, 4)) }

// EgrOffset is [43:32], in 64-byte units.
func (r RHF) EgrOffset() uint16 { return uint16(field(uint64(r), rhfEgrOffShift, rhfEgrOffWidth)) }

// HdrqOffset is [52:44], in dwords from the entry start.
func (r RHF) HdrqOffset() uint16 {
	return uint16(field(uint64(r), rhfHdrqOffShift, rhfHdrqOffWidth))
}

// Errors is the error bits [63:53], in place.
func (r RHF) Errors() uint64 { return uint64(r) & RHFErrMask }

// RcvTypeErr is [58:56].
func (r RHF) RcvTypeErr() uint8 { return uint8(field(uint64(r), RHFRcvTypeErrS, 3)) }

// RHFJKR is a JKR (CN5000) RHF: EgrIndex widens to 14 bits, KHdrLenErr is
// bit 31, L2Type [55:54] (L2Type9B or L2Type16B: the entry's header
// format), RcvSeq [59:56], RheValid bit 63; the other errors are reported
// in the RHE. PktLen, RcvType, UseEgrBfr, EgrOffset and HdrqOffset keep
// their WFR places. [O] fi_opx_hfi1_jkr.h union opx_jkr_rhf gives the
// whole word: also Rsvd 30, L2Type9bSc4 53, RcvPort [61:60] and
// SendPacing 62, which are not decoded here.
type RHFJKR uint64

// Decode returns r's fields.
func (r RHFJKR) Decode() RHFFields {
	f := RHFFields{
		PktLen: r.PktLen(), RcvType: r.RcvType(), UseEgrBfr: r.UseEgrBfr(),
		EgrIndex: r.EgrIndex(), RcvSeq: r.RcvSeq(), EgrOffset: r.EgrOffset(),
		HdrqOffset: r.HdrqOffset(), L2Type: r.L2Type(), RHEValid: r.RHEValid(),
	}
	if r.KHdrLenErr() {
		f.Errors = RHFKHdrLenErr
	}
	return f
}

// PktLen is [11:0].
func (r RHFJKR) PktLen() uint16 { return RHF(r).PktLen() }

// RcvType is [14:12].
func (r RHFJKR) RcvType() uint8 { return RHF(r).RcvType() }

// UseEgrBfr is bit 15.
func (r RHFJKR) UseEgrBfr() bool { return RHF(r).UseEgrBfr() }

// EgrIndex is [29:16].
func (r RHFJKR) EgrIndex() uint16 {
	return uint16(field(uint64(r), rhfEgrIndexShift, jkrEgrIndexWidth))
}

// KHdrLenErr is bit 31.
func (r RHFJKR) KHdrLenErr() bool { return bit(uint64(r), jkrKHdrLenErr) }

// EgrOffset is [43:32].
func (r RHFJKR) EgrOffset() uint16 { return RHF(r).EgrOffset() }

// HdrqOffset is [52:44].
func (r RHFJKR) HdrqOffset() uint16 { return RHF(r).HdrqOffset() }

// L2Type is [55:54].
func (r RHFJKR) L2Type() uint8 { return uint8(field(uint64(r), jkrL2TypeShift, 2)) }

// RcvSeq is [59:56].
func (r RHFJKR) RcvSeq() uint8 { return uint8(field(uint64(r), jkrSeqShift, 4)) }

// RHEValid is bit 63: the entry's RHEQ word holds errors.
func (r RHFJKR) RHEValid() bool { return bit(uint64(r), jkrRHEValid) }

// RHE is a JKR Receive Header Error word, one per RcvHdrQ entry in the
// RHEQ region.
type RHE uint64

// RHE bits.
const (
	RHEICRCErr      uint64 = 1 << 63
	RHETIDBypassErr uint64 = 1 << 62
	RHEECCErr       uint64 = 1 << 61
	RHELenErr       uint64 = 1 << 60
	RHETIDErr       uint64 = 1 << 59
	RHERcvTypeErrS         = 56 // [58:56]
)

// RcvTypeErr is [58:56].
func (e RHE) RcvTypeErr() uint8 { return uint8(field(uint64(e), RHERcvTypeErrS, 3)) }

// Has reports whether every bit of mask is set.
func (e RHE) Has(mask uint64) bool { return uint64(e)&mask == mask }
