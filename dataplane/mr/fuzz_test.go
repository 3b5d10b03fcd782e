package mr

import (
	"math"
	"testing"
	"unsafe"
)

// FuzzRemote throws arbitrary keys, addresses, lengths and needs at a table
// of awkward regions. A lookup must never panic, and every slice it returns
// must be exactly the requested bytes of the region that owns the key.
func FuzzRemote(f *testing.F) {
	tb := NewTable(16)
	words := make([]uint64, 16)
	aligned := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 128)
	regions := []*Region{
		mustRegisterAt(f, tb, aligned, 0, accessAll),
		mustRegisterAt(f, tb, make([]byte, 100), math.MaxUint64-100, accessAll),
		mustRegisterAt(f, tb, make([]byte, 33), 0x1000, LocalWrite|RemoteRead),
		mustRegisterAt(f, tb, nil, 0x2000, accessAll),
		mustRegisterAt(f, tb, aligned[3:67], 8, accessAll),
		mustRegisterAt(f, tb, make([]byte, 64), 0x3000, accessAll),
	}
	reg, _ := tb.Register(make([]byte, 77), accessAll)
	regions = append(regions, reg)
	tb.Invalidate(regions[5].RKey())
	gone := mustRegisterAt(f, tb, make([]byte, 64), 0x4000, accessAll)
	tb.Deregister(gone)
	regions = append(regions, gone)

	// pick selects a region whose rkey (or lkey) is used, mangled by flip;
	// its IOVA is added to addr so that small inputs land inside it.
	f.Add(uint8(0), uint32(0), uint64(8), uint32(8), uint32(RemoteAtomic))
	f.Add(uint8(1), uint32(0), uint64(92), uint32(8), uint32(RemoteWrite))
	f.Add(uint8(1), uint32(0), uint64(99), uint32(2), uint32(RemoteWrite))
	f.Add(uint8(2), uint32(0), uint64(0), uint32(33), uint32(RemoteRead))
	f.Add(uint8(3), uint32(0), uint64(0), uint32(1), uint32(0))
	f.Add(uint8(4), uint32(0), uint64(0), uint32(8), uint32(RemoteAtomic))
	f.Add(uint8(5), uint32(0), uint64(0), uint32(8), uint32(RemoteRead))
	f.Add(uint8(6), uint32(1<<16), uint64(0), uint32(8), uint32(RemoteRead))
	f.Add(uint8(7), uint32(0), uint64(0), uint32(8), uint32(RemoteRead))
	f.Add(uint8(0x80), uint32(0xffffffff), uint64(math.MaxUint64), uint32(math.MaxUint32), uint32(0xff))

	f.Fuzz(func(t *testing.T, pick uint8, flip uint32, addr uint64, length uint32, need uint32) {
		key, local := flip, false
		if i := int(pick & 0x3f); i < len(regions) {
			r := regions[i]
			local = pick&0x40 != 0
			key = r.RKey()
			if local {
				key = r.LKey()
			}
			key ^= flip
			addr += r.Addr()
		}
		var b []byte
		var err error
		if local {
			b, err = tb.Local(key, addr, length, Access(need))
		} else {
			b, err = tb.Remote(key, addr, length, Access(need))
		}
		if err != nil || length == 0 {
			if len(b) != 0 {
				t.Fatalf("err %v, length %d, but %d bytes back", err, length, len(b))
			}
		} else {
			checkInside(t, regions, key, local, addr, uint64(length), Access(need), b)
		}

		if local {
			return
		}
		p, err := tb.Atomic64(key, addr)
		if err != nil {
			if p != nil {
				t.Fatalf("Atomic64: err %v with a pointer", err)
			}
			return
		}
		if uintptr(unsafe.Pointer(p))&7 != 0 || addr&7 != 0 {
			t.Fatalf("Atomic64(%#x, %#x): misaligned %p", key, addr, p)
		}
		checkInside(t, regions, key, false, addr, 8, RemoteAtomic, unsafe.Slice((*byte)(unsafe.Pointer(p)), 8))
	})
}

func checkInside(t *testing.T, regions []*Region, key uint32, local bool, addr, length uint64, need Access, b []byte) {
	t.Helper()
	var r *Region
	for _, c := range regions {
		if (local && c.LKey() == key) || (!local && c.RKey() == key) {
			r = c
		}
	}
	switch {
	case r == nil:
		t.Fatalf("key %#x (local %v) accepted but names no region", key, local)
	case r == regions[len(regions)-1]:
		t.Fatalf("deregistered key %#x accepted", key)
	case !local && r.Invalidated():
		t.Fatalf("invalidated rkey %#x accepted", key)
	case need&^r.Access() != 0:
		t.Fatalf("need %v accepted on a region granting %v", need, r.Access())
	case addr < r.Addr() || addr-r.Addr() > uint64(r.Len()) || length > uint64(r.Len())-(addr-r.Addr()):
		t.Fatalf("[%#x, +%d) accepted outside region [%#x, +%d)", addr, length, r.Addr(), r.Len())
	case uint64(len(b)) != length || uint64(cap(b)) != length:
		t.Fatalf("len %d cap %d, want %d", len(b), cap(b), length)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(r.Bytes())))
	if got, want := uintptr(unsafe.Pointer(&b[0]))-base, uintptr(addr-r.Addr()); got != want {
		t.Fatalf("slice at region offset %d, want %d", got, want)
	}
}
