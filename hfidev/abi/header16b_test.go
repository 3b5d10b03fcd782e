package abi

import (
	"bytes"
	"testing"
)

// The 16B LRH as hfi1_make_16b_hdr builds it ([K] hfi.h): dword 1 starts
// from 0x40000000 (L2 = 2), the upper four bits of each 24-bit LID go to
// dword 2.
func TestHeader16BKnown(t *testing.T) {
	f := Header16BFields{SLID: 0x123456, DLID: 0xabcdef, PktLen: 9, LRHPKey: 0x8001, BECN: true, FECN: true,
		L4: L4IBLocal, SC: 0x15, L2: L2Type16B}
	f.BTHKDETH = BTHKDETHFields{Opcode: 0xC4, PKey: 0x8001, QP: 0x80_00_05, PSN: 0x1234567, KVer: KDETHVersion,
		JKey: 0xbeef, TIDCtrl: 2, TID: 0x3ff, OM: true, KDETHOffset: 0x7fff, KDETHIntr: true}
	f.BTHKDETH.SWData[6] = 0xdeadbeef
	h := make(Header16B, Header16BSize)
	f.Encode(h)
	for i, want := range []uint32{0x80923456, 0x515bcdef, 0x8001a109, 0} {
		if got := le.Uint32(h[4*i:]); got != want {
			t.Errorf("LRH dword %d = %#08x, want %#08x", i, got, want)
		}
	}
	// The BTH and KDETH are a 9B header's, 8 bytes further in.
	if h[16] != 0xC4 || h[21] != 0x80 || h[23] != 0x05 || le.Uint32(h[28:]) != 0x5bff_ffff ||
		le.Uint16(h[32:]) != 0xbeef || le.Uint32(h[60:]) != 0xdeadbeef {
		t.Errorf("BTH/KDETH % x", h[16:])
	}
	if h.Decode() != f {
		t.Errorf("decode %+v\n  want %+v", h.Decode(), f)
	}
	if Header16B(h[:63]).Check() == nil || h.Check() != nil {
		t.Error("Check")
	}
	// OPX's 16B fields (struct fi_opx_hfi1_stl_packet_hdr_16B): rc [27:25],
	// lt 31, entropy [15:0], age [18:16], cspec [23:19].
	g := Header16BFields{RC: 5, LT: true, Entropy: 0xfeed, Age: 3, CSpec: 0x11}
	g.Encode(h)
	if le.Uint32(h[4:]) != 0x8a000000 || le.Uint32(h[12:]) != 0x008bfeed {
		t.Errorf("dword 1 %#x, dword 3 %#x", le.Uint32(h[4:]), le.Uint32(h[12:]))
	}
	h.SetPktLen(0x7ff)
	if h.PktLen() != 0x7ff || h.RC() != 5 || le.Uint32(h[0:])&0x800fffff != 0 {
		t.Errorf("SetPktLen: dword 0 %#x", le.Uint32(h[0:]))
	}
}

// OPX's 16B inject packet (fi_opx_ep.c): PBC 2 + LRH 4 + BTH 3 + KDETH 9 +
// ICRC/tail 2 dwords = PBC.LengthDWs 20, LRH.PktLen 9 flits; hfi2's
// lrh2pbc for 16B is lrhlen/4 + 2.
func TestPktLen16B(t *testing.T) {
	if PktLen16B(0) != 9 || PacketLengthDWs(Header16BSize+Tail16BSize) != 20 {
		t.Errorf("PktLen16B(0) %d, LengthDWs %d", PktLen16B(0), PacketLengthDWs(Header16BSize+Tail16BSize))
	}
	if n := 4096; int(PktLen16B(n))*FlitSize != Header16BSize+n+Tail16BSize {
		t.Errorf("PktLen16B(%d) = %d", n, PktLen16B(n))
	}
}

// BTHKDETH reads what Header9B reads, from either header.
func TestBTHKDETHShared(t *testing.T) {
	f := Header9BFields{BTHKDETHFields: BTHKDETHFields{Opcode: 0xf1, SE: true, MigReq: true, PadCnt: 2, TVer: 1, PKey: 0x7fff, FECN: true,
		QP: 0x80_00_11, AckReq: true, PSN: 0x7654321, KDETHOffset: 0x123, TID: 0x155, TIDCtrl: 1, SH: true,
		KVer: 1, JKey: 0x1234, HCRC: 0x5678, SWData: [7]uint32{1, 2, 3, 4, 5, 6, 7}}}
	h9 := make(Header9B, Header9BSize)
	f.Encode(h9)
	t9 := h9.BTHKDETH()
	h16 := make(Header16B, Header16BSize)
	copy(h16.BTHKDETH(), t9)
	for _, tr := range []BTHKDETH{t9, h16.BTHKDETH()} {
		d := tr.Decode()
		want := f.BTHKDETHFields
		if d != want || tr.TIDOffset() != h9.TIDOffset() {
			t.Errorf("%+v\nwant %+v", d, want)
		}
	}
	// The setters write what Header9B's write.
	e := TIDEntryFor(3, 64) // 256 KiB: 64-byte offsets
	h9.SetPSN(0x42, true)
	h9.SetSWData(5, 0xabc)
	h9.SetKDETHTID(e, 128<<10)
	tr := h16.BTHKDETH()
	tr.SetPSN(0x42, true)
	tr.SetSWData(5, 0xabc)
	tr.SetKDETHTID(e, 128<<10)
	if !bytes.Equal(tr, h9.BTHKDETH()) {
		t.Errorf("setters: % x\nwant % x", tr, h9.BTHKDETH())
	}
}

// RcvLayout.TailBytes: a 16B entry's payload is PktLen×4 − 64 − 8.
func TestSplit16B(t *testing.T) {
	egr := make([]byte, 2*4096)
	e := HdrqEntry(make([]byte, 128))
	l := RcvLayout{Egr: egr, EgrSize: 4096, EgrTIDs: 2, HdrBytes: Header16BSize, TailBytes: Tail16BSize}
	f := RHFFields{PktLen: uint16(2 * PktLen16B(256)), UseEgrBfr: true, EgrIndex: 1, EgrOffset: 2, HdrqOffset: HdrqOffset16B}
	hdr, payload, err := e.Split(&f, &l)
	if err != nil || len(hdr) != Header16BSize || &hdr[0] != &e[0] || len(payload) != 256 || &payload[0] != &egr[4096+128] {
		t.Fatalf("hdr %d payload %d err %v", len(hdr), len(payload), err)
	}
	// The tail quadword must fit the buffer too: 60 bytes at 4032 leave
	// room for a 9B ICRC dword, not for a 16B tail.
	f.PktLen, f.EgrOffset = (Header16BSize+60+Tail16BSize)/4, 63
	if _, _, err := e.Split(&f, &l); err == nil {
		t.Error("a payload whose tail crosses the buffer's end was accepted")
	}
	l.HdrBytes, l.TailBytes = Header16BSize+4, 0
	if _, p, err := e.Split(&f, &l); err != nil || len(p) != 60 {
		t.Errorf("with a 4-byte tail: %d bytes, %v", len(p), err)
	}
}

// A 16B PBC as OPX builds it on JKR (fi_opx_ep.c: L2Type 16B,
// OPX_PBC_JKR_INSERT_NON9B_ICRC = 1<<24) and a WFR bypass PBC ([K]
// chip.h PBC_PACKET_BYPASS bit 28, PBC_INSERT_BYPASS_ICRC bit 24).
func TestPBC16B(t *testing.T) {
	j := PBCFields{LengthDWs: 20, L2Type: L2Type16B, InsertICRC: true, DLID: 0x12345}
	if v := j.Encode(ChipJKR); v != 0x0001_2345_0120_0014 || v.Decode(ChipJKR) != j {
		t.Errorf("JKR %#x", uint64(v))
	}
	w := PBCFields{LengthDWs: 20, Bypass: true, InsertICRC: true}
	if v := w.Encode(ChipWFR); v != 0x1100_0014 || v.Decode(ChipWFR) != w || !v.Bypass() {
		t.Errorf("WFR %#x", uint64(v))
	}
	if (&PBCFields{Bypass: true}).Encode(ChipJKR).Bypass() {
		t.Error("Bypass encoded on JKR, where bit 28 is reserved")
	}
}
