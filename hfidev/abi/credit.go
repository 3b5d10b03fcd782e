package abi

// CreditReturn is the u64 the chip DMAs to the PIO_CRED page to return
// credits ([K] chip.h CR_*; [O] fi_opx_hfi1.h).
type CreditReturn uint64

// Credit-return word bits.
const (
	// CreditCounterMask is the width of FreeCounter and of the software
	// fill counter compared with it: 11 bits.
	CreditCounterMask = 0x7ff

	crStatus         = 11
	crDueToPBC       = 12
	crDueToThreshold = 13
	crDueToErr       = 14
	crDueToForce     = 15
)

// CreditReturnFields are the word's fields, for building one with Encode.
type CreditReturnFields struct {
	FreeCounter    uint16 // 11 bits
	Halted         bool   // Status: the send context has halted
	DueToPBC       bool
	DueToThreshold bool
	DueToErr       bool
	DueToForce     bool
}

// Encode builds the word.
func (f CreditReturnFields) Encode() CreditReturn {
	return CreditReturn(uint64(f.FreeCounter)&CreditCounterMask |
		b2u(f.Halted)<<crStatus | b2u(f.DueToPBC)<<crDueToPBC |
		b2u(f.DueToThreshold)<<crDueToThreshold | b2u(f.DueToErr)<<crDueToErr |
		b2u(f.DueToForce)<<crDueToForce)
}

// Decode returns the word's fields.
func (c CreditReturn) Decode() CreditReturnFields {
	return CreditReturnFields{
		FreeCounter:    c.FreeCounter(),
		Halted:         c.Halted(),
		DueToPBC:       bit(uint64(c), crDueToPBC),
		DueToThreshold: bit(uint64(c), crDueToThreshold),
		DueToErr:       bit(uint64(c), crDueToErr),
		DueToForce:     bit(uint64(c), crDueToForce),
	}
}

// FreeCounter is [10:0]: blocks freed so far, modulo 2048.
func (c CreditReturn) FreeCounter() uint16 { return uint16(c) & CreditCounterMask }

// Halted is the Status bit 11: the context stopped and needs CTXT_RESET.
func (c CreditReturn) Halted() bool { return bit(uint64(c), crStatus) }

// AvailCredits is credits − ((fill − free) mod 2048): the blocks a sender
// may still write, given its 11-bit fill counter and the word's
// FreeCounter ([O] fi_opx_hfi1.h; [P] spio.c).
func AvailCredits(credits, fill, free uint16) uint16 {
	return credits - (fill-free)&CreditCounterMask
}
