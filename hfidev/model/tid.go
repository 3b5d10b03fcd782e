package model

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// rcvArray is one context's share of the RcvArray for expected receive and
// the file's TID bookkeeping, as user_exp_rcv.c keeps them: entries in
// groups of eight on three lists (empty, partly used, full), tid_used
// against tid_limit, and the invalidation list the MMU notifier fills.
// Entry numbers are relative to the context's expected base, as in the
// tidlist.
type rcvArray struct {
	mu      sync.Mutex
	slots   []tidSlot
	groups  []tidGroup
	free    []int // tid_group_list: groups with no entry used
	partial []int // tid_used_list
	full    []int // tid_full_list
	used    int   // fd->tid_used
	limit   int   // fd->tid_limit: expected_count without sharing
	invalid []abi.TIDEntry
	event   *uint64 // the file's event word
	physRun int     // pages per physically contiguous run; 0: whole buffer
	useMN   bool    // fd->use_mn: an MMU notifier (no HFI1_CAP_TID_UNMAP)
	stats   TIDStats
	// Scratch for update, kept so that a TID_UPDATE allocates nothing
	// once they have grown (the data path programs buffers as it goes).
	sets []pageset
	list []abi.TIDEntry
	tmp  []int
}

// tidSlot is one RcvArray entry. owned is the driver's entry_to_rb node
// (programmed by TID_UPDATE and not yet freed by TID_FREE); mem is what
// the chip would write, nil once the entry is invalidated (the node is
// "freed": PT_INVALID_FLUSH written, pages unpinned).
type tidSlot struct {
	owned bool
	mem   []byte
	vaddr uint64
	pages uint32
}

type tidGroup struct {
	base, used int
	bits       uint8
}

// TIDStats counts a context's TID activity.
type TIDStats struct {
	Programmed  uint64 // RcvArray entries programmed by TID_UPDATE
	Freed       uint64 // entries freed by TID_FREE
	Invalidated uint64 // entries InvalidateRange took from the chip
}

func newRcvArray(cfg *Config, event *uint64) *rcvArray {
	n := cfg.expectedCount()
	a := &rcvArray{
		slots: make([]tidSlot, n), groups: make([]tidGroup, n/abi.TIDGroupSize),
		limit: n, event: event, physRun: cfg.TIDPhysRunPages,
		useMN: cfg.Caps&abi.CapTIDUnmap == 0,
	}
	for i := range a.groups {
		a.groups[i].base = i * abi.TIDGroupSize
		a.free = append(a.free, i)
	}
	return a
}

// expectedCount is the context's expected_count: the RcvArray share
// CTXT_INFO reports as rcvtids, less the eager entries rounded up to a
// group (get_ctxt_info reports roundup(egrtids, 8) + expected_count).
func (c *Config) expectedCount() int {
	egr := (int(c.EgrTIDs) + abi.TIDGroupSize - 1) &^ (abi.TIDGroupSize - 1)
	return max(0, int(c.RcvTIDs)-egr) &^ (abi.TIDGroupSize - 1)
}

// userMem is the caller's memory at addr, as the driver reaches it through
// pin_user_pages or copy_{from,to}_user: the model runs in the caller's
// address space, so a user pointer is a pointer. mincore(2) stands in for
// the page-table walk: an unmapped range is EFAULT, never a fault.
func userMem(addr uint64, n int) ([]byte, error) {
	if addr == 0 || n < 0 || addr+uint64(n) < addr {
		return nil, unix.EFAULT
	}
	if n == 0 {
		return nil, nil
	}
	first := addr &^ (abi.PageSize - 1)
	span := int(addr+uint64(n)-first+abi.PageSize-1) &^ (abi.PageSize - 1)
	var vec [256]byte // a page's residency each; the range goes in chunks
	for at := 0; at < span; at += len(vec) * abi.PageSize {
		k := min(span-at, len(vec)*abi.PageSize)
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(first)+uintptr(at), uintptr(k), uintptr(unsafe.Pointer(&vec[0])))
		if e != 0 {
			return nil, unix.EFAULT
		}
	}
	return userBytes(addr, n), nil
}

// userBytes turns an address into a slice without a uintptr→Pointer
// conversion vet would flag: the address is reinterpreted in place.
func userBytes(addr uint64, n int) []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// numUserPages is num_user_pages(vaddr, len).
func numUserPages(vaddr uint64, length uint32) int {
	const mask = ^uint64(abi.PageSize - 1)
	return int(1 + ((vaddr+uint64(length)-1)&mask-vaddr&mask)/abi.PageSize)
}

// pageset is tid_pageset: count pages from page idx of the buffer.
type pageset struct{ idx, count int }

// physBlocks is find_phys_blocks: each physically contiguous run (the
// whole buffer, or physRun pages at a time) cut into power-of-two chunks
// of at most TIDMaxBuffer.
func (a *rcvArray) physBlocks(npages int) []pageset {
	sets := a.sets[:0]
	defer func() { a.sets = sets[:0] }()
	run := npages
	if a.physRun > 0 {
		run = a.physRun
	}
	for start := 0; start < npages; start += run {
		left, idx := min(run, npages-start), start
		for left > 0 {
			n := min(left, abi.TIDMaxBuffer/abi.PageSize)
			for n&(n-1) != 0 {
				n &= n - 1 // round down to a power of two
			}
			sets = append(sets, pageset{idx, n})
			left, idx = left-n, idx+n
		}
	}
	return sets
}

// update is hfi1_user_exp_rcv_setup (the Cornelis driver's, with its
// reservation of tid_used and -ENOSPC when nothing could be programmed).
func (a *rcvArray) update(ti *abi.TIDInfo) error {
	if ti.VAddr%abi.PageSize != 0 {
		return unix.EINVAL
	}
	npages := numUserPages(ti.VAddr, ti.Length)
	if ti.Length == 0 || npages == 0 || npages > len(a.slots) {
		return unix.EINVAL
	}
	mem, err := userMem(ti.VAddr, npages*abi.PageSize)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	sets := a.physBlocks(npages)
	count := min(len(sets), a.limit-a.used)
	if count == 0 {
		return unix.ENOSPC
	}
	p := programming{a: a, sets: sets[:count], mem: mem, vaddr: ti.VAddr, list: a.list[:0]}
	defer func() { a.list = p.list[:0] }()
	for n := count / abi.TIDGroupSize; n > 0 && len(a.free) > 0; n-- {
		g := popFront(&a.free)
		p.program(g, abi.TIDGroupSize)
		a.full = append(a.full, g)
	}
	for len(p.list) < count {
		if len(a.partial) == 0 {
			if len(a.free) == 0 {
				break
			}
			a.partial = append(a.partial, popFront(&a.free))
		}
		a.tmp = append(a.tmp[:0], a.partial...)
		for _, g := range a.tmp {
			use := min(count-len(p.list), abi.TIDGroupSize-a.groups[g].used)
			p.program(g, use)
			if a.groups[g].used == abi.TIDGroupSize {
				move(g, &a.partial, &a.full)
			}
			if len(p.list) >= count {
				break
			}
		}
	}
	if len(p.list) == 0 {
		return unix.ENOSPC
	}
	out, err := userMem(ti.TIDList, 4*len(p.list))
	if err != nil {
		for _, e := range p.list {
			a.unprogram(e)
		}
		return err
	}
	for i, e := range p.list {
		abi.TIDList(out).Set(i, e)
	}
	a.used += len(p.list)
	a.stats.Programmed += uint64(len(p.list))
	ti.TIDCnt, ti.Length = uint32(len(p.list)), uint32(p.pages*abi.PageSize)
	return nil
}

// programming is one TID_UPDATE's progress through its pagesets.
type programming struct {
	a     *rcvArray
	sets  []pageset
	mem   []byte
	vaddr uint64
	list  []abi.TIDEntry
	pages int
}

// program is program_rcvarray: up to count pagesets into g's unused
// entries, in entry order.
func (p *programming) program(g, count int) {
	grp := &p.a.groups[g]
	for use := 0; use < abi.TIDGroupSize && count > 0; use++ {
		if grp.bits&(1<<use) != 0 {
			continue
		}
		set := p.sets[len(p.list)]
		e := grp.base + use
		off := set.idx * abi.PageSize
		p.a.slots[e] = tidSlot{
			owned: true, mem: p.mem[off : off+set.count*abi.PageSize : off+set.count*abi.PageSize],
			vaddr: p.vaddr + uint64(off), pages: uint32(set.count),
		}
		p.list = append(p.list, abi.TIDEntryFor(e, uint32(set.count)))
		p.pages += set.count
		grp.used++
		grp.bits |= 1 << use
		count--
	}
}

// clear is hfi1_user_exp_rcv_clear: entries freed in order until one
// fails; it returns how many were freed and the first error.
func (a *rcvArray) clear(ti *abi.TIDInfo) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if int(ti.TIDCnt) > a.used {
		return 0, unix.EINVAL
	}
	in, err := userMem(ti.TIDList, 4*int(ti.TIDCnt))
	if err != nil {
		return 0, err
	}
	n := 0
	for ; n < int(ti.TIDCnt); n++ {
		if err = a.unprogram(abi.TIDList(in).At(n)); err != nil {
			break
		}
	}
	a.used -= n
	a.stats.Freed += uint64(n)
	return n, err
}

// unprogram is unprogram_rcvarray and clear_tid_node.
func (a *rcvArray) unprogram(t abi.TIDEntry) error {
	e, ok := t.RcvEntry()
	if !ok || e >= len(a.slots) {
		return unix.EINVAL
	}
	if !a.slots[e].owned {
		return unix.EBADF
	}
	a.slots[e] = tidSlot{}
	g := e / abi.TIDGroupSize
	grp := &a.groups[g]
	grp.used--
	grp.bits &^= 1 << (e - grp.base)
	switch grp.used {
	case abi.TIDGroupSize - 1:
		move(g, &a.full, &a.partial)
	case 0:
		move(g, &a.partial, &a.free)
	}
	return nil
}

// invalidRead is hfi1_user_exp_rcv_invalid: the invalidated entries since
// the last read, with the event bit cleared; EINVAL without an MMU
// notifier (HFI1_CAP_TID_UNMAP: the driver has no invalidation list).
func (a *rcvArray) invalidRead(ti *abi.TIDInfo) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.useMN {
		return unix.EINVAL
	}
	n := len(a.invalid)
	ti.TIDCnt = uint32(n)
	if n == 0 {
		return nil
	}
	atomic.AndUint64(a.event, ^abi.EventTIDMMUNotify)
	list := a.invalid
	a.invalid = a.invalid[:0]
	out, err := userMem(ti.TIDList, 4*n)
	if err != nil {
		return err
	}
	for i, e := range list {
		abi.TIDList(out).Set(i, e)
	}
	return nil
}

// invalidate is tid_rb_invalidate for every entry overlapping [vaddr,
// vaddr+n): the chip stops using it at once, the entry stays the file's
// until TID_FREE, and it is queued for TID_INVAL_READ with the event bit
// set on the first. Without an MMU notifier (HFI1_CAP_TID_UNMAP) nothing
// happens: the pages stay pinned and the chip keeps writing them.
func (a *rcvArray) invalidate(vaddr uint64, n int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.useMN {
		return 0
	}
	hit := 0
	for i := range a.slots {
		s := &a.slots[i]
		if s.mem == nil || s.vaddr >= vaddr+uint64(n) || s.vaddr+uint64(len(s.mem)) <= vaddr {
			continue
		}
		s.mem = nil
		hit++
		a.stats.Invalidated++
		if len(a.invalid) < len(a.slots) {
			if len(a.invalid) == 0 {
				atomic.OrUint64(a.event, abi.EventTIDMMUNotify)
			}
			a.invalid = append(a.invalid, abi.TIDEntryFor(i, s.pages))
		}
	}
	return hit
}

// place writes payload at byte off of the entry KDETH names (TID pair,
// TIDCtrl), as the chip does for an expected packet; false when the
// entry is not valid or the payload would run past it (TidErr).
func (a *rcvArray) place(pair uint16, ctrl uint8, off int, payload []byte) bool {
	e, ok := abi.MakeTIDEntry(0, ctrl, pair).RcvEntry()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok || e >= len(a.slots) || a.slots[e].mem == nil || off+len(payload) > len(a.slots[e].mem) {
		return false
	}
	copy(a.slots[e].mem[off:], payload)
	return true
}

func popFront(l *[]int) int {
	g := (*l)[0]
	*l = slices.Delete(*l, 0, 1) // in place: the list keeps its capacity
	return g
}

// move is tid_group_move: g leaves from and joins the tail of to.
func move(g int, from, to *[]int) {
	if i := slices.Index(*from, g); i >= 0 {
		*from = slices.Delete(*from, i, i+1)
	}
	*to = append(*to, g)
}

// tidIoctl is file_ops.c's TID_UPDATE, TID_FREE and TID_INVAL_READ: the
// argument is copied in, and on success tidcnt (and, for TID_UPDATE,
// length) copied back.
func tidIoctl(a *rcvArray, cmd uint32, arg []byte) error {
	var ti abi.TIDInfo
	ti.Unmarshal(arg)
	var err error
	switch cmd {
	case abi.IoctlTIDUpdate:
		err = a.update(&ti)
	case abi.IoctlTIDFree:
		var n int
		n, err = a.clear(&ti)
		ti.TIDCnt = uint32(n)
	default:
		err = a.invalidRead(&ti)
	}
	if err == nil {
		ti.Marshal(arg)
	}
	return err
}

// InvalidateRange stands in for the kernel's MMU notifier on an unmap of
// [vaddr, vaddr+n): every programmed RcvArray entry of every context that
// overlaps it is taken from the chip (packets for it get TidErr) and
// reported by TID_INVAL_READ, with HFI1_EVENT_TID_MMU_NOTIFY set in the
// context's event word. It returns how many entries it invalidated.
func (u *Unit) InvalidateRange(vaddr uint64, n int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	hit := 0
	for _, c := range u.ctxts {
		if c != nil {
			hit += c.tids.invalidate(vaddr, n)
		}
	}
	return hit
}

// TIDStats returns the TID counters of hardware context ctxt; false if no
// context with that number is in use.
func (u *Unit) TIDStats(ctxt uint16) (TIDStats, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	idx := int(ctxt) - u.cfg.FirstUserCtxt
	if idx < 0 || idx >= len(u.ctxts) || u.ctxts[idx] == nil {
		return TIDStats{}, false
	}
	a := u.ctxts[idx].tids
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats, true
}
