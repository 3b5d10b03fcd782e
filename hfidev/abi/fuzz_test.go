package abi

import (
	"bytes"
	"testing"
)

// FuzzRHF: any 64-bit word decodes without panicking and every defined
// field survives decode→encode, on both chips.
func FuzzRHF(f *testing.F) {
	for _, v := range []uint64{0, ^uint64(0), 0x8800_2abc_d7ff_9123, 0x81c0_2001_bfff_0010} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) { checkRHF(t, v) })
}

// FuzzHeader9B: parsing arbitrary bytes never panics; a buffer that passes
// Check decodes to fields that encode back to the same bytes, except for
// reserved bits, and re-decode to the same fields.
func FuzzHeader9B(f *testing.F) {
	f.Add(make([]byte, Header9BSize))
	f.Add(bytes.Repeat([]byte{0xff}, Header9BSize+8))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h := Header9B(b)
		if h.Check() != nil {
			if len(b) >= Header9BSize {
				t.Fatalf("Check refused %d bytes", len(b))
			}
			return
		}
		fields := h.Decode()
		out := make(Header9B, Header9BSize)
		fields.Encode(out)
		if out.Decode() != fields {
			t.Fatalf("fields do not round-trip: %+v", fields)
		}
		// Reserved bits: LRH byte 1 [3:2], LRH byte 4 [7:4] (PktLen is 12 bits), BTH byte 4 [5:0].
		mask := bytes.Repeat([]byte{0xff}, Header9BSize)
		mask[1] = 0xf3
		mask[4] = 0x0f
		mask[bthOff+4] = 0xc0
		for i := range Header9BSize {
			if out[i] != b[i]&mask[i] {
				t.Fatalf("byte %d: %#x re-encodes to %#x", i, b[i], out[i])
			}
		}
	})
}

// FuzzPBC: decode→encode keeps every field on both chips.
func FuzzPBC(f *testing.F) {
	f.Add(uint64(0x42ab_cdef_0031_1010))
	f.Fuzz(func(t *testing.T, v uint64) {
		for _, c := range []Chip{ChipWFR, ChipJKR} {
			d := PBC(v).Decode(c)
			if d.Encode(c).Decode(c) != d {
				t.Fatalf("%v %#x", c, v)
			}
		}
	})
}
