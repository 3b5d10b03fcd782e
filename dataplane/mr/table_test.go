package mr

import (
	"encoding/binary"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"unsafe"
)

func mustRegisterAt(t testing.TB, tb *Table, buf []byte, iova uint64, access Access) *Region {
	t.Helper()
	r, err := tb.RegisterAt(buf, iova, access)
	if err != nil {
		t.Fatalf("RegisterAt(%d bytes, %#x, %v): %v", len(buf), iova, access, err)
	}
	return r
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LocalWrite"},
		{RemoteWrite | RemoteRead, "RemoteWrite|RemoteRead"},
		{accessAll, "LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic"},
		{RemoteAtomic | 0x30, "RemoteAtomic|0x30"},
		{0x100, "0x100"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tc.a), got, tc.want)
		}
	}
}

func TestNewTableBounds(t *testing.T) {
	for _, n := range []int{0, -1, MaxRegions + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewTable(%d) did not panic", n)
				}
			}()
			NewTable(n)
		}()
	}
	NewTable(MaxRegions)
}

func TestRegister(t *testing.T) {
	tb := NewTable(8)
	buf := make([]byte, 100)
	r, err := tb.Register(buf, LocalWrite|RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if r.Addr() != uint64(addrOf(buf)) {
		t.Errorf("Addr = %#x, want the buffer's address %#x", r.Addr(), addrOf(buf))
	}
	if r.Len() != 100 || &r.Bytes()[0] != &buf[0] || r.Access() != LocalWrite|RemoteRead || r.Invalidated() {
		t.Errorf("region = %+v", r)
	}
	if r.LKey() == 0 || r.RKey() == 0 || r.LKey() == r.RKey() {
		t.Errorf("lkey %#x rkey %#x: want distinct and non-zero", r.LKey(), r.RKey())
	}
	if r.LKey()&slotMask != r.RKey()&slotMask {
		t.Errorf("lkey %#x rkey %#x name different slots", r.LKey(), r.RKey())
	}
	// The address a peer would use is the real one.
	b, err := tb.Remote(r.RKey(), uint64(addrOf(buf))+10, 5, RemoteRead)
	if err != nil || &b[0] != &buf[10] {
		t.Errorf("Remote at real address: %v", err)
	}
}

func TestRegisterErrors(t *testing.T) {
	tb := NewTable(4)
	buf := make([]byte, 64)
	for _, tc := range []struct {
		name   string
		iova   uint64
		access Access
		want   error
	}{
		{"unknown bit", 0, 1 << 7, ErrAccess},
		{"remote write without local write", 0, RemoteWrite, ErrAccess},
		{"remote atomic without local write", 0, RemoteAtomic | RemoteRead, ErrAccess},
		{"iova+len overflows", math.MaxUint64 - 62, RemoteRead, ErrBounds},
	} {
		if _, err := tb.RegisterAt(buf, tc.iova, tc.access); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Ends exactly at the top of the address space: allowed.
	mustRegisterAt(t, tb, buf, math.MaxUint64-64, RemoteRead)

	for range 3 {
		mustRegisterAt(t, tb, buf, 0, 0)
	}
	if _, err := tb.RegisterAt(buf, 0, 0); !errors.Is(err, ErrFull) {
		t.Fatalf("fifth registration in a 4-slot table: err = %v, want ErrFull", err)
	}
}

func TestDeregister(t *testing.T) {
	tb, other := NewTable(1), NewTable(1)
	buf := make([]byte, 64)
	r := mustRegisterAt(t, tb, buf, 0, accessAll)
	ro := mustRegisterAt(t, other, buf, 0, accessAll)
	if err := tb.Deregister(ro); !errors.Is(err, ErrBadKey) {
		t.Errorf("Deregister(other table's region) = %v, want ErrBadKey", err)
	}
	if err := tb.Deregister(nil); !errors.Is(err, ErrBadKey) {
		t.Errorf("Deregister(nil) = %v, want ErrBadKey", err)
	}
	if err := tb.Deregister(r); err != nil {
		t.Fatal(err)
	}
	if err := tb.Deregister(r); !errors.Is(err, ErrBadKey) {
		t.Errorf("second Deregister = %v, want ErrBadKey", err)
	}
	if _, err := tb.Remote(r.RKey(), 0, 1, 0); !errors.Is(err, ErrBadKey) {
		t.Errorf("Remote after Deregister = %v, want ErrBadKey", err)
	}
	if _, err := tb.Local(r.LKey(), 0, 1, 0); !errors.Is(err, ErrBadKey) {
		t.Errorf("Local after Deregister = %v, want ErrBadKey", err)
	}
}

// A one-slot table reuses the slot on every registration: the keys of every
// earlier registration must fail, whatever random bits come up.
func TestStaleKeyAfterReuse(t *testing.T) {
	tb := NewTable(1)
	buf := make([]byte, 64)
	prev := mustRegisterAt(t, tb, buf, 0, accessAll)
	for range 10000 {
		if err := tb.Deregister(prev); err != nil {
			t.Fatal(err)
		}
		r := mustRegisterAt(t, tb, buf, 0, accessAll)
		for _, k := range []uint32{prev.LKey(), prev.RKey()} {
			if _, err := tb.Remote(k, 0, 1, 0); !errors.Is(err, ErrBadKey) {
				t.Fatalf("stale key %#x (new rkey %#x): Remote err = %v", k, r.RKey(), err)
			}
			if _, err := tb.Local(k, 0, 1, 0); !errors.Is(err, ErrBadKey) {
				t.Fatalf("stale key %#x (new lkey %#x): Local err = %v", k, r.LKey(), err)
			}
		}
		if r.LKey() == 0 || r.RKey() == 0 || r.LKey() == r.RKey() {
			t.Fatalf("lkey %#x rkey %#x", r.LKey(), r.RKey())
		}
		prev = r
	}
}

// The free list is FIFO, so a freed slot is reused last.
func TestSlotReuseOrder(t *testing.T) {
	tb := NewTable(3)
	buf := make([]byte, 8)
	a := mustRegisterAt(t, tb, buf, 0, 0)
	mustRegisterAt(t, tb, buf, 0, 0)
	if err := tb.Deregister(a); err != nil {
		t.Fatal(err)
	}
	c := mustRegisterAt(t, tb, buf, 0, 0)
	if c.LKey()&slotMask == a.LKey()&slotMask {
		t.Errorf("freed slot %d reused while slot %d was never used", a.LKey()&slotMask, c.LKey()&slotMask)
	}
	d := mustRegisterAt(t, tb, buf, 0, 0)
	if d.LKey()&slotMask != a.LKey()&slotMask {
		t.Errorf("last registration got slot %d, want the freed slot %d", d.LKey()&slotMask, a.LKey()&slotMask)
	}
}

type lookupCase struct {
	name   string
	remote bool // Remote with key, else Local
	key    uint32
	addr   uint64
	length uint32
	need   Access
	want   error
	off    int // on success, the region offset expected
}

func TestLookup(t *testing.T) {
	tb := NewTable(16)
	const base = 0x1000
	buf := make([]byte, 64)
	all := mustRegisterAt(t, tb, buf, base, accessAll)
	top := mustRegisterAt(t, tb, make([]byte, 64), math.MaxUint64-64, accessAll)
	empty := mustRegisterAt(t, tb, nil, 0x500, accessAll)
	unused := (all.RKey() + 5) & slotMask // a slot in range that holds nothing

	cases := []lookupCase{
		{"whole region", true, all.RKey(), base, 64, RemoteWrite, nil, 0},
		{"last byte", true, all.RKey(), base + 63, 1, RemoteRead, nil, 63},
		{"local whole", false, all.LKey(), base, 64, LocalWrite, nil, 0},
		{"local read needs nothing", false, all.LKey(), base + 8, 8, 0, nil, 8},
		{"top of address space", true, top.RKey(), math.MaxUint64 - 8, 8, RemoteRead, nil, 56},

		{"key 0", true, 0, base, 1, 0, ErrBadKey, 0},
		{"slot past table", true, all.RKey()&^slotMask | 16, base, 1, 0, ErrBadKey, 0},
		{"empty slot", true, all.RKey()&^slotMask | unused, base, 1, 0, ErrBadKey, 0},
		{"wrong random bits", true, all.RKey() ^ 1<<16, base, 1, 0, ErrBadKey, 0},
		{"wrong high random bit", true, all.RKey() ^ 1<<31, base, 1, 0, ErrBadKey, 0},
		{"lkey used as rkey", true, all.LKey(), base, 1, 0, ErrBadKey, 0},
		{"rkey used as lkey", false, all.RKey(), base, 1, 0, ErrBadKey, 0},

		{"below region", true, all.RKey(), base - 1, 1, 0, ErrBounds, 0},
		{"straddles start", true, all.RKey(), base - 1, 2, 0, ErrBounds, 0},
		{"one past end", true, all.RKey(), base + 64, 1, 0, ErrBounds, 0},
		{"straddles end", true, all.RKey(), base + 60, 5, 0, ErrBounds, 0},
		{"longer than region", true, all.RKey(), base, 65, 0, ErrBounds, 0},
		{"far past end", true, all.RKey(), base + 1<<40, 1, 0, ErrBounds, 0},
		{"addr+len wraps", true, all.RKey(), math.MaxUint64 - 3, 8, 0, ErrBounds, 0},
		{"max length", true, all.RKey(), base, math.MaxUint32, 0, ErrBounds, 0},
		{"top: addr+len wraps", true, top.RKey(), math.MaxUint64 - 7, 9, 0, ErrBounds, 0},
		{"top: addr+len wraps to region", true, top.RKey(), math.MaxUint64, 0x2000, 0, ErrBounds, 0},
		{"local out of bounds", false, all.LKey(), base + 64, 1, 0, ErrBounds, 0},
		{"zero-length region, one byte", true, empty.RKey(), 0x500, 1, 0, ErrBounds, 0},

		// IBA C9-88: zero-length requests are not checked.
		{"zero length, bad key", true, 0xdeadbeef, 0, 0, RemoteWrite, nil, 0},
		{"zero length, out of bounds", true, all.RKey(), 0, 0, RemoteWrite, nil, 0},
		{"zero length local, bad key", false, 0, 0, 0, LocalWrite, nil, 0},
		{"zero length at end", true, all.RKey(), base + 64, 0, RemoteRead, nil, 0},
		{"zero-length region", true, empty.RKey(), 0x500, 0, RemoteRead, nil, 0},
	}

	// Missing permission, one bit at a time: a region granted every valid
	// combination lacking the bit.
	for bit := LocalWrite; bit <= RemoteAtomic; bit <<= 1 {
		grant := accessAll &^ bit
		if bit == LocalWrite {
			grant = RemoteRead
		}
		r := mustRegisterAt(t, tb, make([]byte, 64), 0, grant)
		cases = append(cases,
			lookupCase{"remote missing " + bit.String(), true, r.RKey(), 0, 8, bit, ErrAccess, 0},
			lookupCase{"local missing " + bit.String(), false, r.LKey(), 0, 8, bit, ErrAccess, 0},
			lookupCase{"remote missing " + bit.String() + " with others", true, r.RKey(), 0, 8, accessAll, ErrAccess, 0},
			lookupCase{"remote granted " + grant.String(), true, r.RKey(), 0, 8, grant, nil, 0},
		)
	}

	for _, tc := range cases {
		var b []byte
		var err error
		if tc.remote {
			b, err = tb.Remote(tc.key, tc.addr, tc.length, tc.need)
		} else {
			b, err = tb.Local(tc.key, tc.addr, tc.length, tc.need)
		}
		if err != tc.want { // bare sentinels, not wrapped
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err != nil {
			if b != nil {
				t.Errorf("%s: error with a non-nil slice", tc.name)
			}
			continue
		}
		if len(b) != int(tc.length) || cap(b) != int(tc.length) {
			t.Errorf("%s: len %d cap %d, want %d", tc.name, len(b), cap(b), tc.length)
		}
		if tc.key == all.RKey() && tc.length > 0 && &b[0] != &buf[tc.off] {
			t.Errorf("%s: slice starts at the wrong byte", tc.name)
		}
	}
}

func TestInvalidate(t *testing.T) {
	tb := NewTable(4)
	buf := make([]byte, 64)
	r := mustRegisterAt(t, tb, buf, 0, accessAll)
	other := mustRegisterAt(t, tb, buf, 0, accessAll)

	for _, k := range []uint32{0, r.LKey(), r.RKey() ^ 1<<20, r.RKey()&^slotMask | 3} {
		if err := tb.Invalidate(k); err != ErrBadKey {
			t.Errorf("Invalidate(%#x) = %v, want ErrBadKey", k, err)
		}
	}
	if err := tb.Invalidate(r.RKey()); err != nil {
		t.Fatal(err)
	}
	if !r.Invalidated() || other.Invalidated() {
		t.Errorf("Invalidated: r %v, other %v", r.Invalidated(), other.Invalidated())
	}
	if err := tb.Invalidate(r.RKey()); err != nil {
		t.Errorf("second Invalidate = %v, want nil", err)
	}
	if _, err := tb.Remote(r.RKey(), 0, 8, RemoteRead); err != ErrInvalidated {
		t.Errorf("Remote after Invalidate = %v, want ErrInvalidated", err)
	}
	if _, err := tb.Atomic64(r.RKey(), 0); err != ErrInvalidated {
		t.Errorf("Atomic64 after Invalidate = %v, want ErrInvalidated", err)
	}
	if _, err := tb.Local(r.LKey(), 0, 8, LocalWrite); err != nil {
		t.Errorf("Local after Invalidate = %v, want nil: the owner keeps its memory", err)
	}
	if _, err := tb.Remote(other.RKey(), 0, 8, RemoteRead); err != nil {
		t.Errorf("Remote on another region = %v", err)
	}
	if err := tb.Deregister(r); err != nil {
		t.Fatal(err)
	}
	if err := tb.Invalidate(r.RKey()); err != ErrBadKey {
		t.Errorf("Invalidate after Deregister = %v, want ErrBadKey", err)
	}
}

func TestAtomic64(t *testing.T) {
	tb := NewTable(8)
	words := make([]uint64, 4) // 8-aligned backing memory
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 32)
	r := mustRegisterAt(t, tb, buf, 0x10000, accessAll)

	p, err := tb.Atomic64(r.RKey(), 0x10008)
	if err != nil {
		t.Fatal(err)
	}
	atomic.AddUint64(p, 0x0102030405060708)
	if got := binary.NativeEndian.Uint64(buf[8:]); got != 0x0102030405060708 {
		t.Errorf("word in memory = %#x: not host byte order", got)
	}

	ro := mustRegisterAt(t, tb, buf, 0, LocalWrite|RemoteRead|RemoteWrite)
	shifted := mustRegisterAt(t, tb, buf[1:17], 0, accessAll) // aligned IOVA, misaligned memory
	for _, tc := range []struct {
		name string
		key  uint32
		addr uint64
		want error
	}{
		{"last word", r.RKey(), 0x10018, nil},
		{"bad key", r.LKey(), 0x10000, ErrBadKey},
		{"misaligned by 1", r.RKey(), 0x10001, ErrMisaligned},
		{"misaligned by 4", r.RKey(), 0x10004, ErrMisaligned},
		{"misaligned by 7", r.RKey(), 0x10007, ErrMisaligned},
		{"misaligned memory behind aligned iova", shifted.RKey(), 0, ErrMisaligned},
		{"straddles end", r.RKey(), 0x1001c, ErrBounds},
		{"past end", r.RKey(), 0x10020, ErrBounds},
		{"wraps", r.RKey(), math.MaxUint64 - 3, ErrBounds},
		{"no atomic access", ro.RKey(), 0, ErrAccess},
	} {
		p, err := tb.Atomic64(tc.key, tc.addr)
		if err != tc.want {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if (err == nil) != (p != nil) {
			t.Errorf("%s: pointer %p with err %v", tc.name, p, err)
		}
	}
}

// A worker looks keys up while another goroutine registers, deregisters and
// invalidates; run with -race. Every successful lookup must hand back bytes
// of the region that owns the key.
func TestConcurrentRegisterLookup(t *testing.T) {
	tb := NewTable(8)
	stable := mustRegisterAt(t, tb, make([]byte, 64), 0, accessAll)

	type pub struct {
		rkey uint32
		base uintptr
		n    int
	}
	var cur atomic.Pointer[pub]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20000 {
			buf := make([]byte, 32+i%32)
			r, err := tb.RegisterAt(buf, 0, accessAll)
			if err != nil {
				t.Error(err)
				return
			}
			cur.Store(&pub{r.RKey(), addrOf(buf), len(buf)})
			if i%3 == 0 {
				tb.Invalidate(r.RKey())
			}
			if err := tb.Deregister(r); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var hits, misses int
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		b, err := tb.Remote(stable.RKey(), 8, 8, RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		b[0]++ // only this goroutine writes the stable region
		p := cur.Load()
		if p == nil {
			continue
		}
		b, err = tb.Remote(p.rkey, 0, 16, RemoteWrite)
		switch err {
		case nil:
			hits++
			if a := addrOf(b); a != p.base || len(b) != 16 {
				t.Fatalf("rkey %#x gave bytes at %#x, want %#x", p.rkey, a, p.base)
			}
		case ErrBadKey, ErrInvalidated:
			misses++
		default:
			t.Fatal(err)
		}
	}
	t.Logf("%d hits, %d misses", hits, misses)
}

func TestAllocs(t *testing.T) {
	tb := NewTable(8)
	words := make([]uint64, 512)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 4096)
	r := mustRegisterAt(t, tb, buf, 0, accessAll)
	sgl := []SGE{{0, 100, r.LKey()}, {1000, 2000, r.LKey()}, {3500, 500, r.LKey()}}
	msg := make([]byte, SGLLen(sgl))
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Remote", func() { tb.Remote(r.RKey(), 64, 64, RemoteWrite) }},
		{"Remote bad key", func() { tb.Remote(r.RKey()^1<<16, 64, 64, RemoteWrite) }},
		{"Remote bounds", func() { tb.Remote(r.RKey(), 4090, 64, RemoteWrite) }},
		{"Local", func() { tb.Local(r.LKey(), 64, 64, LocalWrite) }},
		{"Atomic64", func() { tb.Atomic64(r.RKey(), 64) }},
		{"Atomic64 misaligned", func() { tb.Atomic64(r.RKey(), 65) }},
		{"Gather", func() { tb.Gather(msg, sgl, 50) }},
		{"Scatter", func() { tb.Scatter(sgl, 50, msg[:2000]) }},
		{"Scatter too long", func() { tb.Scatter(sgl, 50, msg) }},
		{"Invalidate bad key", func() { tb.Invalidate(1) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tc.name, n)
		}
	}
}
