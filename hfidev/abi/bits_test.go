package abi

import (
	"math/rand/v2"
	"testing"
)

// hfi1-abi.md §2 PBC: LengthDWs [11:0], VL [15:12], CreditReturn 25,
// InsertHcrc [27:26], Sc4 30, Intr 31, StaticRateControl [47:32];
// §6 JKR PBC: PortIdx [17:16], L2Type [21:20], DLID [55:32], SendCtxt [63:56].
func TestPBCKnown(t *testing.T) {
	f := PBCFields{LengthDWs: 0xabc, VL: 0x5, CreditReturn: true, InsertHCRC: 2, SC4: true, Intr: true, StaticRate: 0x1234}
	if got := f.Encode(ChipWFR); got != 0x0000_1234_CA00_5abc {
		t.Errorf("WFR PBC %#x", uint64(got))
	}
	j := PBCFields{LengthDWs: 0x010, VL: 1, PortIdx: 1, L2Type: L2Type9B, DLID: 0xabcdef, SendCtxt: 0x42}
	if got := j.Encode(ChipJKR); got != 0x42ab_cdef_0031_1010 {
		t.Errorf("JKR PBC %#x", uint64(got))
	}
	// (8 + 56-byte header + 4096 payload)/4 = 1040 dwords, exactly 65 blocks.
	if PacketLengthDWs(56+4096) != 1040 || PIOBlocks(56+4096) != 65 || PIOBlocks(56+4097) != 66 || PIOBlocks(56) != 1 || PIOBlocks(57) != 2 {
		t.Errorf("length/blocks: %d %d %d %d", PacketLengthDWs(56+4096), PIOBlocks(56+4096), PIOBlocks(56), PIOBlocks(57))
	}
}

func TestPBCRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		v := r.Uint64()
		for _, c := range []Chip{ChipWFR, ChipJKR} {
			f := PBC(v).Decode(c)
			back := f.Encode(c)
			if back.Decode(c) != f {
				t.Fatalf("%v: %#x decodes to %+v, re-encodes to %#x", c, v, f, uint64(back))
			}
		}
	}
}

// hfi1-abi.md §2 credit-return word: FreeCounter [10:0], Status 11,
// DueToPbc/Threshold/Err/Force 12-15; available = credits − ((fill − free) & 0x7FF).
func TestCreditReturn(t *testing.T) {
	f := CreditReturnFields{FreeCounter: 0x7ff, Halted: true, DueToPBC: true, DueToThreshold: true, DueToErr: true, DueToForce: true}
	if f.Encode() != 0xffff {
		t.Errorf("all bits %#x", uint64(f.Encode()))
	}
	if (CreditReturnFields{FreeCounter: 0x801}).Encode().FreeCounter() != 1 {
		t.Error("FreeCounter not masked to 11 bits")
	}
	for v := range uint64(1 << 16) {
		if CreditReturn(v).Decode().Encode() != CreditReturn(v) {
			t.Fatalf("%#x does not round-trip", v)
		}
	}
	for _, c := range []struct{ credits, fill, free, want uint16 }{
		{161, 0, 0, 161},
		{161, 100, 0, 61},
		{161, 161, 0, 0},
		{161, 5, 2040, 148}, // fill wrapped past 2047, free not yet: 13 in flight
		{161, 0x7ff, 0x7ff, 161},
		{161, 0x800 + 3, 3, 161}, // software counter wider than 11 bits still works
	} {
		if got := AvailCredits(c.credits, c.fill, c.free); got != c.want {
			t.Errorf("AvailCredits(%d, %d, %d) = %d, want %d", c.credits, c.fill, c.free, got, c.want)
		}
	}
}

// hfi1-abi.md §3 WFR RHF and §6 JKR RHF/RHE.
func TestRHFKnown(t *testing.T) {
	f := RHFFields{PktLen: 0x123, RcvType: RcvTypeEager, UseEgrBfr: true, EgrIndex: 0x7ff,
		RcvSeq: 13, EgrOffset: 0xabc, HdrqOffset: 2, Errors: RHFTIDErr | RHFICRCErr}
	w := f.EncodeWFR()
	if w != 0x8800_2abc_d7ff_9123 {
		t.Errorf("WFR RHF %#x", uint64(w))
	}
	if w.Decode() != f {
		t.Errorf("decode %+v", w.Decode())
	}
	j := RHFFields{PktLen: 0x10, RcvType: RcvTypeExpected, EgrIndex: 0x3fff, RcvSeq: 1,
		EgrOffset: 1, HdrqOffset: 2, Errors: RHFKHdrLenErr, L2Type: L2Type9B, RHEValid: true}
	jw := j.EncodeJKR()
	if jw != 0x81c0_2001_bfff_0010 {
		t.Errorf("JKR RHF %#x", uint64(jw))
	}
	if jw.Decode() != j {
		t.Errorf("JKR decode %+v", jw.Decode())
	}
	e := RHE(RHETIDErr | 5<<RHERcvTypeErrS)
	if !e.Has(RHETIDErr) || e.Has(RHEICRCErr) || e.RcvTypeErr() != 5 {
		t.Errorf("RHE %#x", uint64(e))
	}
	if RHF(7<<RHFRcvTypeErrS).RcvTypeErr() != 7 {
		t.Error("RcvTypeErr")
	}
	if RHFKHdrLenErr|RHFDCUncErr|RHFDCErr|7<<RHFRcvTypeErrS|RHFTIDErr|RHFLenErr|RHFECCErr|RHFVCRCErr|RHFICRCErr != RHFErrMask {
		t.Error("named error bits do not tile RHF_ERROR_SMASK")
	}
}

func TestRcvSeqWrap(t *testing.T) {
	s := uint8(RcvSeqFirst)
	seen := 0
	for range 26 {
		if s < 1 || s > 13 {
			t.Fatalf("sequence left 1..13: %d", s)
		}
		s = NextRcvSeq(s)
		seen++
	}
	if NextRcvSeq(13) != 1 || NextRcvSeq(12) != 13 || s != 1 {
		t.Errorf("wrap: 13→%d 12→%d, after 26 steps %d", NextRcvSeq(13), NextRcvSeq(12), s)
	}
}

func TestRHFRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		checkRHF(t, r.Uint64())
	}
}

func checkRHF(t *testing.T, v uint64) {
	w := RHF(v).Decode()
	if w.EncodeWFR().Decode() != w {
		t.Fatalf("WFR %#x: %+v does not round-trip", v, w)
	}
	// Every defined bit survives decode→encode; only reserved bit 27 drops.
	if uint64(w.EncodeWFR()) != v&^(1<<27) {
		t.Fatalf("WFR %#x re-encodes to %#x", v, uint64(w.EncodeWFR()))
	}
	j := RHFJKR(v).Decode()
	if j.EncodeJKR().Decode() != j {
		t.Fatalf("JKR %#x: %+v does not round-trip", v, j)
	}
	if uint64(j.EncodeJKR()) != v&^(1<<30|1<<53|7<<60) {
		// not defined on JKR: bits 30, 53 and 62:60
		t.Fatalf("JKR %#x re-encodes to %#x", v, uint64(j.EncodeJKR()))
	}
}

// hfi1-abi.md §3 9B header and KDETH dword 0.
func TestHeader9BKnown(t *testing.T) {
	f := Header9BFields{VL: 1, LVer: 0, SL: 2, LNH: LNHIBLocal, DLID: 0x0102, PktLen: 0x011, SLID: 0x0304,
		BTHKDETHFields: BTHKDETHFields{Opcode: 0xC4, SE: true, PadCnt: 3, TVer: 0, PKey: 0xffff, QP: 0x80_00_05, AckReq: true, PSN: 0x1234567,
			KDETHOffset: 0x7fff, OM: true, TID: 0x3ff, TIDCtrl: 2, KDETHIntr: true, SH: false, KVer: KDETHVersion,
			JKey: 0xbeef, HCRC: 0}}
	f.SWData[6] = 0xdeadbeef
	h := make(Header9B, Header9BSize)
	f.Encode(h)
	if h[0] != 0x10 || h[1] != 0x22 || h[4] != 0x00 || h[5] != 0x11 || h[8] != 0xC4 || h[9] != 0xB0 ||
		h[13] != 0x80 || h[15] != 0x05 || h[16] != 0x81 {
		t.Errorf("LRH/BTH bytes % x", h[:20])
	}
	if le.Uint32(h[20:]) != 0x5bff_ffff {
		t.Errorf("KDETH dword0 %#x", le.Uint32(h[20:]))
	}
	if le.Uint32(h[52:]) != 0xdeadbeef || h.JKey() != 0xbeef {
		t.Errorf("swdata[6] %#x jkey %#x", le.Uint32(h[52:]), h.JKey())
	}
	if h.Decode() != f {
		t.Errorf("decode %+v\n  want %+v", h.Decode(), f)
	}
	if Header9B(h[:55]).Check() == nil || h.Check() != nil {
		t.Error("Check")
	}
}

// hfi1-abi.md §5: LEN (pages) [10:0], CTRL [21:20], IDX (pair) [31:22].
func TestTIDEntry(t *testing.T) {
	e := MakeTIDEntry(512, TIDCtrlOdd, 0x3ff)
	if e != 0xffe0_0200 || e.Pages() != 512 || e.Ctrl() != TIDCtrlOdd || e.Pair() != 0x3ff {
		t.Errorf("%#x: pages %d ctrl %d pair %d", uint32(e), e.Pages(), e.Ctrl(), e.Pair())
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 10000 {
		v := TIDEntry(r.Uint32())
		if MakeTIDEntry(v.Pages(), v.Ctrl(), v.Pair()) != v&^(0x1ff<<11) { // bits 19:11 unused
			t.Fatalf("%#x does not round-trip", uint32(v))
		}
	}
}
