package sys

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ErrMisaligned is returned by NewMemRegion for memory that does not start
// on an 8-byte boundary.
var ErrMisaligned = errors.New("sys: region not 8-byte aligned")

// MemRegion is a Region over ordinary bytes: an mmap'd mapping on the real
// device, a Go slice in the model.
type MemRegion struct {
	b []byte
}

// NewMemRegion wraps b, which must start 8-byte aligned.
func NewMemRegion(b []byte) (*MemRegion, error) {
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, ErrMisaligned
	}
	return &MemRegion{b: b}, nil
}

// Len implements Region.
func (r *MemRegion) Len() int { return len(r.b) }

// Bytes implements Region.
func (r *MemRegion) Bytes() []byte { return r.b }

func (r *MemRegion) word(off int) *uint64 {
	if off%8 != 0 {
		panic("sys: misaligned region offset")
	}
	r.check(off, 8)
	return (*uint64)(unsafe.Pointer(&r.b[off]))
}

// Load64 implements Region.
func (r *MemRegion) Load64(off int) uint64 { return atomic.LoadUint64(r.word(off)) }

// Store64 implements Region.
func (r *MemRegion) Store64(off int, v uint64) { atomic.StoreUint64(r.word(off), v) }

// StoreBlock implements Region.
func (r *MemRegion) StoreBlock(off int, blk *[8]uint64) {
	r.check(off, 64)
	for i, v := range blk {
		atomic.StoreUint64(r.word(off+8*i), v)
	}
}

// check panics unless [off, off+n) is inside the region. It compares
// lengths instead of touching r.b[off+n-1]: that byte read would race, for
// the race detector, with the chip's atomic stores to the same word.
func (r *MemRegion) check(off, n int) {
	if off < 0 || off > len(r.b)-n {
		panic(fmt.Sprintf("sys: region access [%d, %d) outside %d bytes", off, off+n, len(r.b)))
	}
}
