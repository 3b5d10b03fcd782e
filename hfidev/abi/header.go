package abi

import (
	"encoding/binary"
	"errors"
)

var be = binary.BigEndian

// Sizes of the 9B OPA header pieces.
const (
	LRH9BSize     = 8
	BTHSize       = 12
	Header9BSize  = LRH9BSize + BTHSize + KDETHHeaderSize // 56
	lrhOff        = 0
	bthOff        = LRH9BSize
	kdethOff      = LRH9BSize + BTHSize
	kdethSWDataN  = 7
	kdethSWDataAt = kdethOff + 8
)

// LNH values (LRH link next header).
const (
	LNHIBLocal  = 2 // BTH follows
	LNHIBGlobal = 3 // GRH follows: rejected for user contexts
)

// KDETHVersion is KDETH.KVer for every user packet.
const KDETHVersion = 1

// ErrShortHeader is returned by Header9B.Check for a buffer shorter than a
// 9B header.
var ErrShortHeader = errors.New("hfi1 header: shorter than 56 bytes")

// Header9B is a view of a 9B OPA header as user packets carry it: LRH
// (big-endian), BTH (big-endian), KDETH (little-endian), 56 bytes. Accessors
// assume len ≥ Header9BSize; call Check first on untrusted input.
type Header9B []byte

// Check reports whether h is long enough to read.
func (h Header9B) Check() error {
	if len(h) < Header9BSize {
		return ErrShortHeader
	}
	return nil
}

// LRH fields.

// VL is LRH byte 0 [7:4].
func (h Header9B) VL() uint8 { return h[0] >> 4 }

// LVer is LRH byte 0 [3:0].
func (h Header9B) LVer() uint8 { return h[0] & 0xf }

// SL is LRH byte 1 [7:4].
func (h Header9B) SL() uint8 { return h[1] >> 4 }

// LNH is LRH byte 1 [1:0].
func (h Header9B) LNH() uint8 { return h[1] & 3 }

// DLID is LRH bytes 2-3.
func (h Header9B) DLID() uint16 { return be.Uint16(h[2:]) }

// PktLen is LRH bytes 4-5 [11:0]: dwords from the LRH to the ICRC
// inclusive, which is PBC.LengthDWs − 1.
func (h Header9B) PktLen() uint16 { return be.Uint16(h[4:]) & 0xfff }

// SLID is LRH bytes 6-7.
func (h Header9B) SLID() uint16 { return be.Uint16(h[6:]) }

// BTH fields.

// Opcode is BTH byte 0; user packets need Opcode&0xC0 == 0xC0.
func (h Header9B) Opcode() uint8 { return h.BTHKDETH().Opcode() }

// SE is BTH byte 1 bit 7.
func (h Header9B) SE() bool { return h.BTHKDETH().SE() }

// MigReq is BTH byte 1 bit 6.
func (h Header9B) MigReq() bool { return h.BTHKDETH().MigReq() }

// PadCnt is BTH byte 1 [5:4].
func (h Header9B) PadCnt() uint8 { return h.BTHKDETH().PadCnt() }

// TVer is BTH byte 1 [3:0].
func (h Header9B) TVer() uint8 { return h.BTHKDETH().TVer() }

// PKey is BTH bytes 2-3.
func (h Header9B) PKey() uint16 { return h.BTHKDETH().PKey() }

// FECN is BTH byte 4 bit 7, BECN bit 6.
func (h Header9B) FECN() bool { return h.BTHKDETH().FECN() }

// BECN is BTH byte 4 bit 6.
func (h Header9B) BECN() bool { return h.BTHKDETH().BECN() }

// QP is BTH bytes 5-7. For KDETH packets byte 5 is KDETHQPPrefix and byte 7
// the receive context.
func (h Header9B) QP() uint32 { return h.BTHKDETH().QP() }

// AckReq is BTH byte 8 bit 7.
func (h Header9B) AckReq() bool { return h.BTHKDETH().AckReq() }

// PSN is BTH bytes 8-11 [30:0]: the 31-bit extended PSN; the IB 24-bit PSN
// is its low 24 bits.
func (h Header9B) PSN() uint32 { return h.BTHKDETH().PSN() }

// KDETH fields.

// KDETHOffset is KDETH dword 0 [14:0], in 4-byte units or, with OM, 64-byte
// units.
func (h Header9B) KDETHOffset() uint16 { return h.BTHKDETH().KDETHOffset() }

// OM is KDETH dword 0 bit 15 (offset mode).
func (h Header9B) OM() bool { return h.BTHKDETH().OM() }

// TID is KDETH dword 0 [25:16].
func (h Header9B) TID() uint16 { return h.BTHKDETH().TID() }

// TIDCtrl is KDETH dword 0 [27:26].
func (h Header9B) TIDCtrl() uint8 { return h.BTHKDETH().TIDCtrl() }

// KDETHIntr is KDETH dword 0 bit 28.
func (h Header9B) KDETHIntr() bool { return h.BTHKDETH().KDETHIntr() }

// SH is KDETH dword 0 bit 29 (header suppression).
func (h Header9B) SH() bool { return h.BTHKDETH().SH() }

// KVer is KDETH dword 0 [31:30]; KDETHVersion for valid packets.
func (h Header9B) KVer() uint8 { return h.BTHKDETH().KVer() }

// JKey is the KDETH u16 at offset 4.
func (h Header9B) JKey() uint16 { return h.BTHKDETH().JKey() }

// HCRC is the KDETH u16 at offset 6.
func (h Header9B) HCRC() uint16 { return h.BTHKDETH().HCRC() }

// SWData returns software dword i (0..6) after the KDETH's first 8 bytes.
func (h Header9B) SWData(i int) uint32 { return h.BTHKDETH().SWData(i) }

// Header9BFields are a 9B header's fields, for building one with Encode:
// the LRH's, and the BTH and KDETH as a 16B header has them too.
type Header9BFields struct {
	VL, LVer, SL, LNH uint8
	DLID, SLID        uint16
	PktLen            uint16
	BTHKDETHFields
}

// Encode writes the header into h, which must be at least Header9BSize
// bytes; reserved bits are written as zero.
func (f *Header9BFields) Encode(h Header9B) {
	_ = h[Header9BSize-1]
	h[0] = f.VL<<4 | f.LVer&0xf
	h[1] = f.SL<<4 | f.LNH&3
	be.PutUint16(h[2:], f.DLID)
	be.PutUint16(h[4:], f.PktLen&0xfff)
	be.PutUint16(h[6:], f.SLID)
	f.BTHKDETHFields.Encode(h.BTHKDETH())
}

// Decode returns h's fields; h must pass Check.
func (h Header9B) Decode() Header9BFields {
	return Header9BFields{
		VL: h.VL(), LVer: h.LVer(), SL: h.SL(), LNH: h.LNH(),
		DLID: h.DLID(), SLID: h.SLID(), PktLen: h.PktLen(),
		BTHKDETHFields: h.BTHKDETH().Decode(),
	}
}
