package model

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// tidCtx is one assigned context and a page-aligned buffer.
type tidCtx struct {
	t    *testing.T
	u    *Unit
	fd   int
	c    *context
	list []uint32 // the tidlist the ioctls read and write (heap, stays put)
}

func newTIDCtx(t *testing.T, cfg Config) *tidCtx {
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	return &tidCtx{t: t, u: u, fd: fd, c: u.files[fd].ctxt, list: make([]uint32, 4096)}
}

func pages(t *testing.T, n int) []byte {
	b, err := sys.AllocPages(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.FreePages(b) })
	return b
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func (x *tidCtx) ioctl(cmd uint32, ti *abi.TIDInfo) error {
	arg := make([]byte, abi.TIDInfoSize)
	ti.Marshal(arg)
	err := x.u.Ioctl(x.fd, cmd, arg)
	ti.Unmarshal(arg)
	return err
}

func (x *tidCtx) update(vaddr uint64, n int) (abi.TIDInfo, error) {
	ti := abi.TIDInfo{VAddr: vaddr, TIDList: addr(unsafe.Slice((*byte)(unsafe.Pointer(&x.list[0])), 4)), Length: uint32(n)}
	err := x.ioctl(abi.IoctlTIDUpdate, &ti)
	return ti, err
}

func (x *tidCtx) free(list ...uint32) (abi.TIDInfo, error) {
	copy(x.list, list)
	ti := abi.TIDInfo{TIDList: uint64(uintptr(unsafe.Pointer(&x.list[0]))), TIDCnt: uint32(len(list))}
	err := x.ioctl(abi.IoctlTIDFree, &ti)
	return ti, err
}

func (x *tidCtx) entries(ti abi.TIDInfo) []uint32 {
	return append([]uint32(nil), x.list[:ti.TIDCnt]...)
}

// TID_UPDATE as user_exp_rcv.c programs: power-of-two chunks of at most
// 2 MiB per physically contiguous run, entries in group order, the tidlist
// encoding of exp_rcv.h, tid_used counted; TID_FREE gives them back.
func TestTIDUpdateFree(t *testing.T) {
	for _, tc := range []struct {
		run, pages int
		want       []uint32 // LEN of each entry
	}{
		{0, 16, []uint32{16}},
		{0, 1024, []uint32{512, 512}},
		{0, 7, []uint32{4, 2, 1}},
		{4, 10, []uint32{4, 4, 2}},
		{1, 9, []uint32{1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		cfg := DefaultConfig(abi.ChipWFR)
		cfg.TIDPhysRunPages = tc.run
		x := newTIDCtx(t, cfg)
		buf := pages(t, tc.pages*abi.PageSize)
		ti, err := x.update(addr(buf), len(buf))
		if err != nil || int(ti.TIDCnt) != len(tc.want) || int(ti.Length) != len(buf) {
			t.Fatalf("run %d, %d pages: %v, %d entries, %d bytes", tc.run, tc.pages, err, ti.TIDCnt, ti.Length)
		}
		for i, e := range x.entries(ti) {
			te := abi.TIDEntry(e)
			if got, ok := te.RcvEntry(); !ok || got != i || te.Pages() != tc.want[i] {
				t.Errorf("run %d: entry %d = %#x (rcventry %d, %d pages), want rcventry %d, %d pages",
					tc.run, i, e, got, te.Pages(), i, tc.want[i])
			}
		}
		if x.c.tids.used != len(tc.want) {
			t.Errorf("tid_used %d", x.c.tids.used)
		}
		fi, err := x.free(x.entries(ti)...)
		if err != nil || fi.TIDCnt != ti.TIDCnt || x.c.tids.used != 0 || len(x.c.tids.free) != len(x.c.tids.groups) {
			t.Errorf("free: %v, %d freed, used %d, %d free groups", err, fi.TIDCnt, x.c.tids.used, len(x.c.tids.free))
		}
	}
}

// Every TID_UPDATE / TID_FREE / TID_INVAL_READ errno the driver returns.
func TestTIDErrors(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.EgrTIDs, cfg.RcvTIDs = 8, 8+16 // 16 expected entries: two groups
	cfg.TIDPhysRunPages = 1
	x := newTIDCtx(t, cfg)
	buf := pages(t, 32*abi.PageSize)
	for _, tc := range []struct {
		name  string
		vaddr uint64
		n     int
		want  error
	}{
		{"vaddr not page-aligned", addr(buf) + 64, abi.PageSize, unix.EINVAL},
		{"length 0", addr(buf), 0, unix.EINVAL},
		{"more pages than expected entries", addr(buf), 17 * abi.PageSize, unix.EINVAL},
	} {
		if _, err := x.update(tc.vaddr, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Unmapped memory cannot be pinned.
	gone, err := sys.AllocPages(abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	ga := addr(gone)
	_ = sys.FreePages(gone)
	if _, err := x.update(ga, abi.PageSize); !errors.Is(err, unix.EFAULT) {
		t.Errorf("unmapped buffer: %v", err)
	}
	// A tidlist the driver cannot write: nothing stays programmed.
	ti := abi.TIDInfo{VAddr: addr(buf), Length: abi.PageSize}
	if err := x.ioctl(abi.IoctlTIDUpdate, &ti); !errors.Is(err, unix.EFAULT) || x.c.tids.used != 0 {
		t.Errorf("tidlist NULL: %v, tid_used %d", err, x.c.tids.used)
	}
	// Exhaustion: 10 pages, then 10 more of which only 6 find entries
	// (a partial update: tidcnt and length say what was programmed), then
	// ENOSPC.
	ti, err = x.update(addr(buf), 10*abi.PageSize)
	if err != nil || ti.TIDCnt != 10 {
		t.Fatal(err, ti.TIDCnt)
	}
	all := x.entries(ti)
	ti, err = x.update(addr(buf[10*abi.PageSize:]), 10*abi.PageSize)
	if err != nil || ti.TIDCnt != 6 || ti.Length != 6*abi.PageSize {
		t.Fatalf("partial update: %v, %d entries, %d bytes", err, ti.TIDCnt, ti.Length)
	}
	all = append(all, x.entries(ti)...)
	if _, err := x.update(addr(buf[20*abi.PageSize:]), abi.PageSize); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("RcvArray exhausted: %v", err)
	}
	// TID_FREE: more entries than in use; CTRL 0 and 3; IDX beyond the
	// share; an entry the file does not own (freed twice).
	if _, err := x.free(make([]uint32, 17)...); !errors.Is(err, unix.EINVAL) {
		t.Errorf("tidcnt > tid_used: %v", err)
	}
	for _, e := range []uint32{
		uint32(abi.MakeTIDEntry(1, 0, 0)), uint32(abi.MakeTIDEntry(1, abi.TIDCtrlBad, 0)),
		uint32(abi.MakeTIDEntry(1, abi.TIDCtrlEven, 8)),
	} {
		if _, err := x.free(e); !errors.Is(err, unix.EINVAL) {
			t.Errorf("free %#x: %v, want EINVAL", e, err)
		}
	}
	if _, err := x.free(all[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := x.free(all[0]); !errors.Is(err, unix.EBADF) {
		t.Errorf("free unowned: %v, want EBADF", err)
	}
	// A list failing part-way frees what precedes the bad entry.
	if _, err := x.free(all[1], all[0], all[2]); !errors.Is(err, unix.EBADF) || x.c.tids.used != 14 {
		t.Errorf("partial free: %v, tid_used %d", err, x.c.tids.used)
	}
	if got, ok := x.u.TIDStats(x.c.num); !ok || got.Programmed != 16 || got.Freed != 2 {
		t.Errorf("stats %+v", got)
	}
}

// InvalidateRange (the MMU notifier): the entries over the range leave the
// chip, are listed by TID_INVAL_READ with their lengths, the event bit is
// set until the read; the file still owns them until TID_FREE.
func TestTIDInvalidate(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	cfg.TIDPhysRunPages = 2
	x := newTIDCtx(t, cfg)
	buf := pages(t, 8*abi.PageSize)
	ti, err := x.update(addr(buf), len(buf))
	if err != nil || ti.TIDCnt != 4 {
		t.Fatal(err, ti.TIDCnt)
	}
	all := x.entries(ti)
	ev := func() uint64 { return loadWord(x.u.events, x.u.eventOff(x.c, 0)) }
	if n := x.u.InvalidateRange(addr(buf)+3*abi.PageSize, 2*abi.PageSize); n != 2 || ev()&abi.EventTIDMMUNotify == 0 {
		t.Fatalf("invalidated %d, event %#x", n, ev())
	}
	if x.c.tids.place(abi.TIDEntry(all[1]).Pair(), abi.TIDEntry(all[1]).Ctrl(), 0, []byte{1}) {
		t.Error("an invalidated entry still receives")
	}
	if !x.c.tids.place(abi.TIDEntry(all[0]).Pair(), abi.TIDEntry(all[0]).Ctrl(), 0, []byte{1}) || buf[0] != 1 {
		t.Error("a valid entry does not receive")
	}
	clear(x.list)
	rd := abi.TIDInfo{TIDList: uint64(uintptr(unsafe.Pointer(&x.list[0])))}
	if err := x.ioctl(abi.IoctlTIDInvalRead, &rd); err != nil || rd.TIDCnt != 2 ||
		x.list[0] != all[1] || x.list[1] != all[2] || ev()&abi.EventTIDMMUNotify != 0 {
		t.Errorf("INVAL_READ: %v, %d, %#x, event %#x; want %#x", err, rd.TIDCnt, x.list[:2], ev(), all[1:3])
	}
	if err := x.ioctl(abi.IoctlTIDInvalRead, &rd); err != nil || rd.TIDCnt != 0 {
		t.Errorf("second INVAL_READ: %v, %d", err, rd.TIDCnt)
	}
	if _, err := x.free(all...); err != nil || x.c.tids.used != 0 {
		t.Errorf("free after invalidation: %v, %d", err, x.c.tids.used)
	}
}

// With HFI1_CAP_TID_UNMAP the driver registers no MMU notifier: an unmap
// leaves the entries programmed, and TID_INVAL_READ is EINVAL.
func TestTIDUnmapCap(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.Caps |= abi.CapTIDUnmap
	x := newTIDCtx(t, cfg)
	buf := pages(t, 4*abi.PageSize)
	ti, err := x.update(addr(buf), len(buf))
	if err != nil {
		t.Fatal(err)
	}
	e := abi.TIDEntry(x.entries(ti)[0])
	if n := x.u.InvalidateRange(addr(buf), len(buf)); n != 0 || !x.c.tids.place(e.Pair(), e.Ctrl(), 0, []byte{7}) || buf[0] != 7 {
		t.Errorf("invalidated %d entries without a notifier", n)
	}
	rd := abi.TIDInfo{TIDList: uint64(uintptr(unsafe.Pointer(&x.list[0])))}
	if err := x.ioctl(abi.IoctlTIDInvalRead, &rd); !errors.Is(err, unix.EINVAL) {
		t.Errorf("INVAL_READ: %v, want EINVAL", err)
	}
}

// check verifies the RcvArray bookkeeping: tid_used is the entries owned,
// every group is on exactly the list its use says, and its bitmap matches
// its entries.
func (a *rcvArray) check(t *testing.T) {
	t.Helper()
	owned := 0
	on := make(map[int]int)
	for li, l := range [][]int{a.free, a.partial, a.full} {
		for _, g := range l {
			if _, dup := on[g]; dup {
				t.Fatalf("group %d on two lists", g)
			}
			on[g] = li
		}
	}
	for g, grp := range a.groups {
		used := 0
		for i := range abi.TIDGroupSize {
			s := a.slots[grp.base+i]
			if s.owned != (grp.bits&(1<<i) != 0) {
				t.Fatalf("group %d entry %d: owned %v, bit %v", g, i, s.owned, grp.bits&(1<<i) != 0)
			}
			if s.owned {
				used++
			}
		}
		owned += used
		want := 1
		switch used {
		case 0:
			want = 0
		case abi.TIDGroupSize:
			want = 2
		}
		if used != grp.used || on[g] != want {
			t.Fatalf("group %d: %d used (says %d), on list %d", g, used, grp.used, on[g])
		}
	}
	if owned != a.used {
		t.Fatalf("tid_used %d, %d entries owned", a.used, owned)
	}
}

// FuzzTIDFree: any sequence of updates (any length and run size) and of
// frees of any tidlist entries keeps the RcvArray's bookkeeping exact.
func FuzzTIDFree(f *testing.F) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.EgrTIDs, cfg.RcvTIDs, cfg.UserContexts = 8, 8+64, 1
	f.Add([]byte{3, 20, 1, 0, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{1, 64, 0, 0x40, 0x10, 0, 0, 2, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		cfg.TIDPhysRunPages = 0
		if len(ops) > 0 {
			cfg.TIDPhysRunPages = int(ops[0] % 8)
		}
		x := newTIDCtx(t, cfg)
		buf := pages(t, 64*abi.PageSize)
		var live []uint32
		for len(ops) >= 5 {
			op := ops[:5]
			ops = ops[5:]
			if op[0]%2 == 0 {
				n := int(op[1]) % 65
				if ti, err := x.update(addr(buf[int(op[2]%64)*abi.PageSize:]), n*abi.PageSize-int(op[3])%4); err == nil {
					live = append(live, x.entries(ti)...)
				} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("update: %v", err)
				}
			} else {
				e := uint32(op[1]) | uint32(op[2])<<8 | uint32(op[3])<<16 | uint32(op[4])<<24
				if len(live) > 0 && op[4]%2 == 0 {
					e = live[int(op[1])%len(live)]
				}
				_, err := x.free(e)
				var errno unix.Errno
				if err != nil && !errors.As(err, &errno) {
					t.Fatalf("free: %v", err)
				}
			}
			x.c.tids.check(t)
		}
	})
}
