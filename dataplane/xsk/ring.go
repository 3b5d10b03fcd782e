package xsk

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is the part shared by the four rings: the kernel's producer,
// consumer and flags words and the size of the descriptor array, all in
// memory mapped from the socket. The only unsafe code of the package that
// touches rings lives in this file: newRing turns the mapping into typed
// pointers and slices, after which everything is bounds-checked Go.
type ring struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	mask     uint32
	size     uint32
	mem      []byte // the whole mapping, for munmap
}

// mapRing maps a ring of size entries of entrySize bytes at the socket's
// page offset pgoff, using the offsets the kernel reported.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32, entrySize uintptr) (ring, unsafe.Pointer, error) {
	length := int(off.Desc) + int(size)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, nil, fmt.Errorf("mapping ring at %#x: %w", pgoff, err)
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	r := ring{
		producer: (*atomic.Uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*atomic.Uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*atomic.Uint32)(unsafe.Add(base, off.Flags)),
		mask:     size - 1,
		size:     size,
		mem:      mem,
	}
	return r, unsafe.Add(base, off.Desc), nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// needWakeup reports the kernel's XDP_RING_NEED_WAKEUP flag for this ring.
func (r *ring) needWakeup() bool { return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0 }

// prodRing is a ring we produce into (fill, tx): we own the producer
// index, the kernel the consumer index.
type prodRing struct {
	ring
	cachedProd uint32 // our next slot; published by submit
	cachedCons uint32 // kernel consumer + size, as last read
	published  uint32 // cachedProd at the last submit
}

func (r *prodRing) init() {
	r.cachedProd = r.producer.Load()
	r.published = r.cachedProd
	r.cachedCons = r.consumer.Load() + r.size
}

// free returns how many slots can be reserved, at least n if that many
// are free. It reads the kernel's consumer index only when the cache
// cannot satisfy n, so a producer that keeps up touches the shared cache
// line once per ring's worth of entries rather than once per batch.
func (r *prodRing) free(n uint32) uint32 {
	f := r.cachedCons - r.cachedProd
	if f >= n {
		return f
	}
	r.cachedCons = r.consumer.Load() + r.size
	return r.cachedCons - r.cachedProd
}

// submit publishes the slots written since the last submit; with none
// since then it writes nothing, so that an idle poll loop does not store
// to the cache line the kernel reads.
func (r *prodRing) submit() {
	if r.cachedProd != r.published {
		r.producer.Store(r.cachedProd)
		r.published = r.cachedProd
	}
}

// pending is how many published or reserved entries the kernel has not
// consumed yet.
func (r *prodRing) pending() uint32 { return r.cachedProd - r.consumer.Load() }

// consRing is a ring we consume from (rx, completion).
type consRing struct {
	ring
	cachedCons uint32 // our next entry; published by release
	cachedProd uint32 // kernel producer, as last read
}

func (r *consRing) init() {
	r.cachedCons = r.consumer.Load()
	r.cachedProd = r.producer.Load()
}

// avail returns how many entries are ready, at most n. The kernel's
// producer index is read only when the cache says the ring is empty.
func (r *consRing) avail(n uint32) uint32 {
	a := r.cachedProd - r.cachedCons
	if a == 0 {
		r.cachedProd = r.producer.Load()
		a = r.cachedProd - r.cachedCons
	}
	return min(a, n)
}

// release hands n consumed entries back to the kernel.
func (r *consRing) release(n uint32) {
	r.cachedCons += n
	r.consumer.Store(r.cachedCons)
}

// addrRing is a fill ring: UMEM chunk addresses we give the kernel.
type addrRing struct {
	prodRing
	addrs []uint64
}

func mapAddrRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (*addrRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, 8)
	if err != nil {
		return nil, err
	}
	ar := &addrRing{prodRing: prodRing{ring: r}, addrs: unsafe.Slice((*uint64)(p), size)}
	ar.init()
	return ar, nil
}

// put writes addr into the next slot; the caller checked free.
func (r *addrRing) put(addr uint64) {
	r.addrs[r.cachedProd&r.mask] = addr
	r.cachedProd++
}

// compRing is a completion ring: UMEM chunk addresses the kernel is done
// sending.
type compRing struct {
	consRing
	addrs []uint64
}

func mapCompRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32) (*compRing, error) {
	r, p, err := mapRing(fd, pgoff, off, size, 8)
	if err != nil {
		return nil, err
	}
	cr := &compRing{consRing: consRing{ring: r}, addrs: unsafe.Slice((*uint64)(p), size)}
	cr.init()
	return cr, nil
}

// at returns the i-th ready entry (0 ≤ i < avail).
func (r *compRing) at(i uint32) uint64 { return r.addrs[(r.cachedCons+i)&r.mask] }

// txRing is the tx ring: descriptors we ask the kernel to send.
type txRing struct {
	prodRing
	descs []unix.XDPDesc
}

func mapTxRing(fd int, off unix.XDPRingOffset, size uint32) (*txRing, error) {
	r, p, err := mapRing(fd, unix.XDP_PGOFF_TX_RING, off, size, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return nil, err
	}
	tr := &txRing{prodRing: prodRing{ring: r}, descs: unsafe.Slice((*unix.XDPDesc)(p), size)}
	tr.init()
	return tr, nil
}

// put writes a descriptor into the next slot; the caller checked free.
func (r *txRing) put(addr uint64, n int, opts uint32) {
	d := &r.descs[r.cachedProd&r.mask]
	d.Addr, d.Len, d.Options = addr, uint32(n), opts
	r.cachedProd++
}

// rxRing is the rx ring: descriptors of frames the kernel received.
type rxRing struct {
	consRing
	descs []unix.XDPDesc
}

func mapRxRing(fd int, off unix.XDPRingOffset, size uint32) (*rxRing, error) {
	r, p, err := mapRing(fd, unix.XDP_PGOFF_RX_RING, off, size, unsafe.Sizeof(unix.XDPDesc{}))
	if err != nil {
		return nil, err
	}
	rr := &rxRing{consRing: consRing{ring: r}, descs: unsafe.Slice((*unix.XDPDesc)(p), size)}
	rr.init()
	return rr, nil
}

// at returns the i-th ready descriptor (0 ≤ i < avail), by value: the
// slot belongs to the kernel again once released.
func (r *rxRing) at(i uint32) unix.XDPDesc { return r.descs[(r.cachedCons+i)&r.mask] }
