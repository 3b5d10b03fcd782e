package model

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

func storeWord(b []byte, off int, v uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v)
}

// Mmap implements sys.Sys. The checks are mmap(2)'s own (length, page
// alignment, write access to the file), then hfi1_file_mmap's and
// hfi1_do_mmap's, in the driver's order: magic, context assigned, ctxt and
// subctxt of the token, MAP_SHARED, the per-type checks (EPERM for a
// writable mapping of a read-only region, EINVAL for a region the context
// lacks, EFAULT for SDMA_COMP without SDMA), and last the exact length.
func (u *Unit) Mmap(fd int, offset int64, length, prot, flags int) (sys.Region, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f, ok := u.files[fd]
	if !ok {
		return nil, unix.EBADF
	}
	if length <= 0 || offset&(abi.PageSize-1) != 0 {
		return nil, unix.EINVAL
	}
	if flags&(unix.MAP_SHARED|unix.MAP_PRIVATE) == 0 {
		return nil, unix.EINVAL
	}
	if flags&unix.MAP_SHARED != 0 && prot&unix.PROT_WRITE != 0 && !f.write {
		return nil, unix.EACCES
	}
	length = abi.PageAlign(length) // the vma covers whole pages

	tok := abi.Token(offset)
	if !tok.Valid() {
		return nil, unix.EINVAL
	}
	c := f.ctxt
	if c == nil {
		return nil, unix.EINVAL
	}
	if tok.Ctxt() != c.num || tok.Subctxt() != f.subctxt {
		return nil, unix.EINVAL
	}
	if flags&unix.MAP_SHARED == 0 {
		return nil, unix.EINVAL
	}
	write := prot&unix.PROT_WRITE != 0
	ci := u.ctxtInfoFor(c, f.subctxt)
	var (
		mem    []byte     // plain memory to map, or
		dev    sys.Region // a doorbell region
		memlen int
	)
	switch tok.Type() {
	case abi.MmapPIOBufs, abi.MmapPIOBufsSOP:
		// The driver clears VM_MAYREAD but does not refuse PROT_READ.
		memlen = abi.RegionLen(abi.MmapPIOBufs, &ci, u.cfg.Chip)
		dev = c.pio
		if tok.Type() == abi.MmapPIOBufsSOP {
			dev = c.sop
		}
	case abi.MmapPIOCred:
		if write {
			return nil, unix.EPERM
		}
		memlen = abi.PageSize
		page := u.creditOff(c) &^ (abi.PageSize - 1)
		mem = u.credits[page : page+abi.PageSize]
	case abi.MmapRcvRHEQ:
		if c.rheq == nil {
			return nil, unix.EINVAL
		}
		if write {
			return nil, unix.EPERM
		}
		memlen, mem = len(c.rheq), c.rheq
	case abi.MmapRcvHdrQ:
		memlen, mem = len(c.hdrq), c.hdrq
	case abi.MmapRcvEgrBuf:
		// The only type whose length is checked before its protection.
		if length != len(c.egr) {
			return nil, unix.EINVAL
		}
		if write {
			return nil, unix.EPERM
		}
		memlen, mem = len(c.egr), c.egr
	case abi.MmapURegs:
		memlen, mem = len(c.uregs), c.uregs
		// The Cornelis driver also accepts a 4 KiB map of the 8 KiB JKR
		// block ("hack: accept a 4K mmap for uregs").
		if length != memlen && length == abi.PageSize {
			memlen, mem = abi.PageSize, c.uregs[:abi.PageSize]
		}
	case abi.MmapEvents:
		memlen = abi.PageSize
		page := u.eventOff(c, 0) &^ (abi.PageSize - 1)
		mem = u.events[page : page+abi.PageSize]
	case abi.MmapStatus:
		if write {
			return nil, unix.EPERM
		}
		memlen, mem = abi.PageSize, u.status
	case abi.MmapRTail:
		if u.cfg.Caps&abi.CapDMARtail == 0 {
			return nil, unix.EINVAL
		}
		if write {
			return nil, unix.EPERM
		}
		memlen, mem = abi.PageSize, c.rtail
	case abi.MmapSDMAComp:
		if c.comp == nil {
			return nil, unix.EFAULT
		}
		memlen, mem = len(c.comp), c.comp
	default:
		// Includes the subcontext types: with no sharing the driver's
		// lengths are 0 (hdrq, eager) or it maps a page that faults on
		// access (uregs); the model refuses them all.
		return nil, unix.EINVAL
	}
	if length != memlen {
		return nil, unix.EINVAL
	}
	var r sys.Region = dev
	if dev == nil {
		m, err := sys.NewMemRegion(mem)
		if err != nil {
			return nil, err
		}
		r = m
	}
	u.mapped[r] = struct{}{}
	return r, nil
}
