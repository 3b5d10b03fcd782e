package wire

import "encoding/binary"

// RETH is the RDMA extended transport header: the remote buffer of a write
// or read.
type RETH []byte

// IsValid reports whether b is long enough for a RETH.
func (b RETH) IsValid() bool { return len(b) >= RETHSize }

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// DMALen returns the length of the whole transfer in bytes.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:]) }

// Encode writes the header.
func (b RETH) Encode(va uint64, rkey, dmaLen uint32) {
	binary.BigEndian.PutUint64(b[0:], va)
	binary.BigEndian.PutUint32(b[8:], rkey)
	binary.BigEndian.PutUint32(b[12:], dmaLen)
}

// AETH is the ACK extended transport header.
type AETH []byte

// IsValid reports whether b is long enough for an AETH.
func (b AETH) IsValid() bool { return len(b) >= AETHSize }

// Syndrome returns the syndrome byte; see SyndromeKind and SyndromeValue.
func (b AETH) Syndrome() uint8 { return b[0] }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() uint32 { return binary.BigEndian.Uint32(b[0:]) & mask24 }

// Encode writes the header.
func (b AETH) Encode(syndrome uint8, msn uint32) {
	binary.BigEndian.PutUint32(b[0:], uint32(syndrome)<<24|msn&mask24)
}

// AtomicETH is the atomic extended transport header of a compare-and-swap
// or fetch-and-add request.
type AtomicETH []byte

// IsValid reports whether b is long enough for an AtomicETH.
func (b AtomicETH) IsValid() bool { return len(b) >= AtomicETHSize }

// VA returns the remote virtual address.
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SwapAdd returns the swap value (compare-and-swap) or addend (fetch-and-add).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[12:]) }

// Compare returns the compare value; unused by fetch-and-add.
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[20:]) }

// Encode writes the header.
func (b AtomicETH) Encode(va uint64, rkey uint32, swapAdd, compare uint64) {
	binary.BigEndian.PutUint64(b[0:], va)
	binary.BigEndian.PutUint32(b[8:], rkey)
	binary.BigEndian.PutUint64(b[12:], swapAdd)
	binary.BigEndian.PutUint64(b[20:], compare)
}

// AtomicAckETH is the atomic acknowledge extended transport header.
type AtomicAckETH []byte

// IsValid reports whether b is long enough for an AtomicAckETH.
func (b AtomicAckETH) IsValid() bool { return len(b) >= AtomicAckETHSize }

// OrigData returns the value the target held before the atomic operation.
func (b AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// Encode writes the header.
func (b AtomicAckETH) Encode(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// ImmDt is the immediate data header.
type ImmDt []byte

// IsValid reports whether b is long enough for an ImmDt.
func (b ImmDt) IsValid() bool { return len(b) >= ImmDtSize }

// Imm returns the immediate data as the big-endian value of its four bytes.
// Verbs hands the same bytes to the application unchanged (imm_data is
// __be32), so a caller that wants them in wire order converts back.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// Encode writes the header.
func (b ImmDt) Encode(v uint32) { binary.BigEndian.PutUint32(b[0:], v) }

// IETH is the invalidate extended transport header.
type IETH []byte

// IsValid reports whether b is long enough for an IETH.
func (b IETH) IsValid() bool { return len(b) >= IETHSize }

// RKey returns the remote key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// Encode writes the header.
func (b IETH) Encode(rkey uint32) { binary.BigEndian.PutUint32(b[0:], rkey) }

// DETH is the datagram extended transport header.
type DETH []byte

// IsValid reports whether b is long enough for a DETH.
func (b DETH) IsValid() bool { return len(b) >= DETHSize }

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SrcQP returns the sender's queue pair number.
func (b DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(b[4:]) & mask24 }

// Encode writes the header; the reserved byte is written as zero.
func (b DETH) Encode(qkey, srcQP uint32) {
	binary.BigEndian.PutUint32(b[0:], qkey)
	binary.BigEndian.PutUint32(b[4:], srcQP&mask24)
}
