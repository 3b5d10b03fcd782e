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
		// The shared BTH/KDETH view reads what Header9B reads.
		tr := h.BTHKDETH().Decode()
		if tr.Opcode != fields.Opcode || tr.QP != fields.QP || tr.PSN != fields.PSN || tr.PKey != fields.PKey ||
			tr.TID != fields.TID || tr.KVer != fields.KVer || tr.JKey != fields.JKey || tr.SWData != fields.SWData ||
			h.BTHKDETH().TIDOffset() != h.TIDOffset() {
			t.Fatalf("BTHKDETH %+v, Header9B %+v", tr, fields)
		}
	})
}

// FuzzHeader16B: as FuzzHeader9B for the 16B header: any bytes parse
// without panicking; fields round-trip; re-encoding keeps every bit but
// the reserved ones (LRH dword 3 [31:24], BTH byte 4 [5:0]); the BTH and
// KDETH read the same through Header16B.BTHKDETH as through a 9B header
// holding them.
func FuzzHeader16B(f *testing.F) {
	f.Add(make([]byte, Header16BSize))
	f.Add(bytes.Repeat([]byte{0xff}, Header16BSize+8))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h := Header16B(b)
		if h.Check() != nil {
			if len(b) >= Header16BSize {
				t.Fatalf("Check refused %d bytes", len(b))
			}
			return
		}
		fields := h.Decode()
		out := make(Header16B, Header16BSize)
		fields.Encode(out)
		if out.Decode() != fields {
			t.Fatalf("fields do not round-trip: %+v", fields)
		}
		mask := bytes.Repeat([]byte{0xff}, Header16BSize)
		mask[15] = 0
		mask[LRH16BSize+4] = 0xc0
		for i := range Header16BSize {
			if out[i] != b[i]&mask[i] {
				t.Fatalf("byte %d: %#x re-encodes to %#x", i, b[i], out[i])
			}
		}
		if fields.SLID > 0xffffff || fields.DLID > 0xffffff || fields.PktLen > 0x7ff {
			t.Fatalf("field beyond its width: %+v", fields)
		}
		h9 := make(Header9B, Header9BSize)
		copy(h9[LRH9BSize:], h.BTHKDETH())
		if d := h9.Decode(); d.Opcode != fields.BTHKDETH.Opcode || d.QP != fields.BTHKDETH.QP ||
			d.PSN != fields.BTHKDETH.PSN || d.SWData != fields.BTHKDETH.SWData || d.TIDCtrl != fields.BTHKDETH.TIDCtrl {
			t.Fatalf("16B %+v, as 9B %+v", fields.BTHKDETH, d)
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

// FuzzHdrqEntry: any RHF over any entry and eager area splits without
// panicking, and what Split returns lies inside the entry (before the RHF)
// and inside one eager buffer.
func FuzzHdrqEntry(f *testing.F) {
	f.Add(uint64(0x0002_0000_1000_9012), 128, 4, 4096)
	f.Add(uint64(0), 0, 0, 0)
	f.Add(^uint64(0), 16, 1, 64)
	f.Fuzz(func(t *testing.T, rhf uint64, entLen, egrTIDs, egrSize int) {
		entLen, egrTIDs, egrSize = entLen&0x3ff, egrTIDs&0xf, egrSize&0x3fff
		e := HdrqEntry(make([]byte, max(entLen, RHFSize)))
		egr := make([]byte, egrTIDs*egrSize)
		// 9B, and 16B with its tail quadword (which must fit the buffer too).
		for _, l := range []RcvLayout{
			{Egr: egr, EgrSize: egrSize, EgrTIDs: egrTIDs, HdrBytes: Header9BSize},
			{Egr: egr, EgrSize: egrSize, EgrTIDs: egrTIDs, HdrBytes: Header16BSize, TailBytes: Tail16BSize},
		} {
			for _, fl := range []RHFFields{RHF(rhf).Decode(), RHFJKR(rhf).Decode()} {
				hdr, payload, err := e.Split(&fl, &l)
				if err != nil {
					continue
				}
				if len(hdr) != l.HdrBytes || !within(hdr, e[:e.RHFOffset()]) {
					t.Fatalf("header outside the entry: RHF %+v", fl)
				}
				if fl.UseEgrBfr {
					buf := egr[int(fl.EgrIndex)*egrSize : int(fl.EgrIndex+1)*egrSize]
					if !within(payload, buf) || cap(payload) != len(payload) {
						t.Fatalf("payload outside buffer %d: RHF %+v", fl.EgrIndex, fl)
					}
					if end := int(fl.EgrOffset)*EgrOffsetUnit + len(payload) + max(l.TailBytes, ICRCSize); end > egrSize {
						t.Fatalf("tail past buffer %d: RHF %+v", fl.EgrIndex, fl)
					}
				} else if payload != nil {
					t.Fatal("payload without UseEgrBfr")
				}
			}
		}
	})
}

// within reports whether s is a subslice of b.
func within(s, b []byte) bool {
	if len(s) == 0 {
		return true
	}
	for i := range b {
		if &b[i] == &s[0] {
			return i+len(s) <= len(b)
		}
	}
	return false
}
