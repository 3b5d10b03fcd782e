package sys

import (
	"sync/atomic"
	"unsafe"
)

// ioRegion is a writable mapping of device registers or PIO buffers on the
// real chip. Stores are plain moves, not atomics: on amd64 an atomic store
// is XCHG, a locked instruction that on write-combining PIO memory would
// split every block into 8-byte bus writes and on uncached register memory
// would take a bus lock. Loads stay atomic (plain MOVs on amd64).
type ioRegion struct {
	MemRegion
}

// fenceWord is what fence's locked instruction targets.
var fenceWord atomic.Uint32

// fence drains the CPU's write-combining buffers: any locked instruction
// does on x86 (Go has no SFENCE intrinsic), and it orders the stores on
// arm64.
func fence() { fenceWord.Add(1) }

// Store64 implements Region: one 8-byte store, then a fence so that a
// register write (RcvHdrHead, RcvEgrIndexHead) reaches the chip now.
func (r *ioRegion) Store64(off int, v uint64) {
	*r.word(off) = v
	fence()
}

// StoreBlock implements Region: 64 bytes of plain stores to one block,
// which write-combining delivers as one burst, then a fence so that blocks
// reach the chip in the order they were written.
func (r *ioRegion) StoreBlock(off int, blk *[8]uint64) {
	if off%8 != 0 {
		panic("sys: misaligned region offset")
	}
	_ = r.b[off+63]
	*(*[8]uint64)(unsafe.Pointer(&r.b[off])) = *blk
	fence()
}
