package mr

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Sentinel errors. Lookups return them bare, so the per-packet path never
// allocates; registration wraps them with %w.
var (
	ErrBadKey      = errors.New("mr: bad key")
	ErrInvalidated = errors.New("mr: rkey invalidated")
	ErrAccess      = errors.New("mr: access not permitted")
	ErrBounds      = errors.New("mr: out of bounds")
	ErrMisaligned  = errors.New("mr: misaligned atomic")
	ErrLength      = errors.New("mr: length mismatch")
	ErrFull        = errors.New("mr: table full")
)

// MaxRegions is the most regions one table holds: the slot index fills the
// low 16 bits of a key.
const MaxRegions = 1 << slotBits

const (
	slotBits = 16
	slotMask = 1<<slotBits - 1
)

// Region is a registered buffer. Its fields never change after registration
// except the invalidated flag, so readers need no synchronisation beyond the
// atomic load that found the region.
type Region struct {
	buf         []byte
	iova        uint64
	lkey, rkey  uint32
	access      Access
	invalidated atomic.Bool
	table       *Table
}

// Addr returns the IOVA of byte 0: the address peers and SGEs use.
func (r *Region) Addr() uint64 { return r.iova }

// Len returns the length of the region in bytes.
func (r *Region) Len() int { return len(r.buf) }

// LKey returns the key for local access (SGEs).
func (r *Region) LKey() uint32 { return r.lkey }

// RKey returns the key a peer uses for remote access.
func (r *Region) RKey() uint32 { return r.rkey }

// Access returns the permissions granted at registration.
func (r *Region) Access() Access { return r.access }

// Bytes returns the registered buffer.
func (r *Region) Bytes() []byte { return r.buf }

// Invalidated reports whether the rkey has been invalidated.
func (r *Region) Invalidated() bool { return r.invalidated.Load() }

// slice returns the bytes at [addr, addr+length) or ErrBounds. The capacity
// is clipped so that a caller appending to the result cannot write past the
// checked range into the rest of the region.
func (r *Region) slice(addr uint64, length uint32) ([]byte, error) {
	// Subtract before comparing: addr+length may wrap, addr-iova cannot once
	// addr >= iova.
	off := addr - r.iova
	if addr < r.iova || off > uint64(len(r.buf)) || uint64(length) > uint64(len(r.buf))-off {
		return nil, ErrBounds
	}
	end := off + uint64(length)
	return r.buf[off:end:end], nil
}

// Table holds the regions of one protection domain or device.
type Table struct {
	// slots never grows, so lookups can index it without a lock.
	slots []atomic.Pointer[Region]

	mu sync.Mutex // serialises registration; lookups never take it
	// free is a FIFO ring of free slot indices: reusing the slot freed
	// longest ago gives a stale key the longest time to fall out of use.
	free        []uint16
	head, nfree int
	// last holds the random bits of the slot's previous keys (lkey in the
	// low half, rkey in the high half) so a reused slot never reissues them.
	last []uint32
	rng  *rand.ChaCha8
}

// NewTable returns a table for up to maxRegions regions. All memory is
// allocated here, once. It panics unless 1 <= maxRegions <= MaxRegions.
func NewTable(maxRegions int) *Table {
	if maxRegions < 1 || maxRegions > MaxRegions {
		panic(fmt.Sprintf("mr: NewTable(%d): want 1..%d regions", maxRegions, MaxRegions))
	}
	var seed [32]byte
	crand.Read(seed[:]) // never fails (Go 1.24+); keys must be unguessable by peers
	t := &Table{
		slots: make([]atomic.Pointer[Region], maxRegions),
		free:  make([]uint16, maxRegions),
		nfree: maxRegions,
		last:  make([]uint32, maxRegions),
		rng:   rand.NewChaCha8(seed),
	}
	for i := range t.free {
		t.free[i] = uint16(i)
	}
	return t
}

// Register registers buf with its real address as IOVA, as verbs does, so an
// application can hand out pointers into buf as RDMA addresses.
func (t *Table) Register(buf []byte, access Access) (*Region, error) {
	return t.RegisterAt(buf, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access)
}

// RegisterAt registers buf with an explicit IOVA, e.g. 0 for zero-based
// addressing. Remote and atomic writes require LocalWrite, as in verbs.
func (t *Table) RegisterAt(buf []byte, iova uint64, access Access) (*Region, error) {
	if !access.valid() {
		return nil, fmt.Errorf("registering %d bytes with access %v: %w", len(buf), access, ErrAccess)
	}
	if uint64(len(buf)) > math.MaxUint64-iova {
		return nil, fmt.Errorf("registering %d bytes at iova %#x: %w", len(buf), iova, ErrBounds)
	}
	r := &Region{buf: buf, iova: iova, access: access, table: t}

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.nfree == 0 {
		return nil, fmt.Errorf("registering %d bytes: %w", len(buf), ErrFull)
	}
	slot := t.free[t.head]
	t.head = (t.head + 1) % len(t.free)
	t.nfree--

	prev := t.last[slot]
	prevL, prevR := prev&0xffff, prev>>16
	var l, rk uint32
	for l == 0 || l == prevL || l == prevR {
		l = uint32(t.rng.Uint64()) & 0xffff
	}
	for rk == 0 || rk == l || rk == prevL || rk == prevR {
		rk = uint32(t.rng.Uint64()) & 0xffff
	}
	t.last[slot] = l | rk<<16
	r.lkey = l<<slotBits | uint32(slot)
	r.rkey = rk<<slotBits | uint32(slot)
	// The store publishes the fully built region to lock-free readers.
	t.slots[slot].Store(r)
	return r, nil
}

// Deregister removes r; its keys stop working at once. Deregistering a
// region twice, or one from another table, returns ErrBadKey.
func (t *Table) Deregister(r *Region) error {
	if r == nil || r.table != t {
		return fmt.Errorf("deregistering: %w", ErrBadKey)
	}
	slot := r.lkey & slotMask
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.slots[slot].CompareAndSwap(r, nil) {
		return fmt.Errorf("deregistering lkey %#x: %w", r.lkey, ErrBadKey)
	}
	t.free[(t.head+t.nfree)%len(t.free)] = uint16(slot)
	t.nfree++
	return nil
}

// Invalidate stops rkey working for remote access, for SEND_WITH_INVALIDATE
// and local invalidate (rxe_invalidate_mr). The lkey keeps working: the
// owner still reads and writes its own memory until it deregisters.
// Invalidating twice is not an error, as in rxe, so a retried operation
// cannot fail on it. It does not lock: the responder calls it per packet.
func (t *Table) Invalidate(rkey uint32) error {
	r := t.lookup(rkey)
	if r == nil || r.rkey != rkey {
		return ErrBadKey
	}
	r.invalidated.Store(true)
	return nil
}

// lookup returns the region in key's slot, which the caller must match
// against the whole key.
func (t *Table) lookup(key uint32) *Region {
	slot := key & slotMask
	if slot >= uint32(len(t.slots)) {
		return nil
	}
	return t.slots[slot].Load()
}

// Remote checks an incoming request for [addr, addr+length) under rkey and
// returns the bytes to place into or read from. need names the operation
// (RemoteWrite, RemoteRead, RemoteAtomic); a zero-length request is not
// checked (see the package comment).
func (t *Table) Remote(rkey uint32, addr uint64, length uint32, need Access) ([]byte, error) {
	if length == 0 {
		return nil, nil
	}
	r := t.lookup(rkey)
	if r == nil || r.rkey != rkey {
		return nil, ErrBadKey
	}
	if r.invalidated.Load() {
		return nil, ErrInvalidated
	}
	if need&^r.access != 0 {
		return nil, ErrAccess
	}
	return r.slice(addr, length)
}

// Local checks a local SGE: need is 0 to read a send buffer, LocalWrite for
// a receive or read-response target.
func (t *Table) Local(lkey uint32, addr uint64, length uint32, need Access) ([]byte, error) {
	if length == 0 {
		return nil, nil
	}
	r := t.lookup(lkey)
	if r == nil || r.lkey != lkey {
		return nil, ErrBadKey
	}
	if need&^r.access != 0 {
		return nil, ErrAccess
	}
	return r.slice(addr, length)
}

// Atomic64 returns the 8-byte word at addr for an atomic request. The word
// is in host byte order, as in rxe; use sync/atomic on it. Both addr and the
// word's real address must be 8-aligned: a zero-based IOVA says nothing about
// the memory behind it, and sync/atomic faults on misaligned words on some
// architectures.
func (t *Table) Atomic64(rkey uint32, addr uint64) (*uint64, error) {
	b, err := t.Remote(rkey, addr, 8, RemoteAtomic)
	if err != nil {
		return nil, err
	}
	if addr&7 != 0 || uintptr(unsafe.Pointer(&b[0]))&7 != 0 {
		return nil, ErrMisaligned
	}
	return (*uint64)(unsafe.Pointer(&b[0])), nil
}
