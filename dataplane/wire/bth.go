package wire

import "encoding/binary"

const (
	bthOpcode = 0
	bthFlags  = 1 // SE, M, pad count, transport header version
	bthPKey   = 2
	bthECN    = 4 // FECN, BECN and six reserved bits
	bthDestQP = 4 // low 24 bits of the word at 4
	bthAPSN   = 8 // AckReq, seven reserved bits, 24-bit PSN

	bthSE      = 0x80
	bthMig     = 0x40
	bthPadMask = 0x30
	bthPadSh   = 4
	bthTVer    = 0x0f
	bthFECN    = 0x80
	bthBECN    = 0x40
	bthAckReq  = 0x80
	mask24     = 0x00ffffff
)

// BTH is the InfiniBand base transport header.
type BTH []byte

// BTHFields describes a BTH for Encode. Reserved bits are written as zero.
type BTHFields struct {
	Opcode    Opcode
	Solicited bool
	MigReq    bool
	PadCount  uint8 // 0-3 bytes of padding before the ICRC
	TVer      uint8 // 4 bits; always 0 in RoCEv2
	PKey      uint16
	FECN      bool
	BECN      bool
	DestQP    uint32 // 24 bits
	AckReq    bool
	PSN       uint32 // 24 bits
}

// IsValid reports whether b is long enough for a BTH.
func (b BTH) IsValid() bool { return len(b) >= BTHSize }

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// Solicited reports whether the solicited event bit is set.
func (b BTH) Solicited() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the migration state bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMig != 0 }

// PadCount returns the number of pad bytes between the payload and the ICRC.
func (b BTH) PadCount() int { return int(b[bthFlags]&bthPadMask) >> bthPadSh }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVer }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN reports whether forward congestion was signalled.
func (b BTH) FECN() bool { return b[bthECN]&bthFECN != 0 }

// BECN reports whether backward congestion was signalled.
func (b BTH) BECN() bool { return b[bthECN]&bthBECN != 0 }

// DestQP returns the destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthDestQP:]) & mask24 }

// AckReq reports whether the requester asks for an acknowledge.
func (b BTH) AckReq() bool { return b[bthAPSN]&bthAckReq != 0 }

// PSN returns the packet sequence number.
func (b BTH) PSN() uint32 { return binary.BigEndian.Uint32(b[bthAPSN:]) & mask24 }

// SetPSN sets the packet sequence number, keeping the AckReq bit.
func (b BTH) SetPSN(psn uint32) {
	binary.BigEndian.PutUint32(b[bthAPSN:], uint32(b[bthAPSN]&bthAckReq)<<24|psn&mask24)
}

// SetAckReq sets or clears the AckReq bit.
func (b BTH) SetAckReq(v bool) { b[bthAPSN] = setBit(b[bthAPSN], bthAckReq, v) }

// SetFECN sets or clears the forward congestion bit. It is outside the
// ICRC, so a switch or receiver may change it without recomputing the ICRC.
func (b BTH) SetFECN(v bool) { b[bthECN] = setBit(b[bthECN], bthFECN, v) }

// SetBECN sets or clears the backward congestion bit; like FECN it is
// outside the ICRC.
func (b BTH) SetBECN(v bool) { b[bthECN] = setBit(b[bthECN], bthBECN, v) }

// SetDestQP sets the destination queue pair number, keeping FECN and BECN.
func (b BTH) SetDestQP(qpn uint32) {
	binary.BigEndian.PutUint32(b[bthDestQP:], uint32(b[bthECN])<<24|qpn&mask24)
}

// Encode writes the header described by f; b must have room for BTHSize
// bytes.
func (b BTH) Encode(f *BTHFields) {
	b[bthOpcode] = uint8(f.Opcode)
	b[bthFlags] = setBit(0, bthSE, f.Solicited) | setBit(0, bthMig, f.MigReq) |
		f.PadCount<<bthPadSh&bthPadMask | f.TVer&bthTVer
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	ecn := setBit(0, bthFECN, f.FECN) | setBit(0, bthBECN, f.BECN)
	binary.BigEndian.PutUint32(b[bthDestQP:], uint32(ecn)<<24|f.DestQP&mask24)
	binary.BigEndian.PutUint32(b[bthAPSN:], uint32(setBit(0, bthAckReq, f.AckReq))<<24|f.PSN&mask24)
}

// Fields returns the fields of b; Encode(b.Fields()) writes b back, less any
// reserved bits.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode:    b.Opcode(),
		Solicited: b.Solicited(),
		MigReq:    b.MigReq(),
		PadCount:  uint8(b.PadCount()),
		TVer:      b.TVer(),
		PKey:      b.PKey(),
		FECN:      b.FECN(),
		BECN:      b.BECN(),
		DestQP:    b.DestQP(),
		AckReq:    b.AckReq(),
		PSN:       b.PSN(),
	}
}

func setBit(b, bit uint8, v bool) uint8 {
	if v {
		return b | bit
	}
	return b &^ bit
}
