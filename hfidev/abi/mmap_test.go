package abi

import (
	"testing"

	"golang.org/x/sys/unix"
)

// hfi1-abi.md §1 "mmap token": magic [63:32], type [27:24], ctxt [23:16],
// subctxt [15:12], offset [11:0].
func TestTokenEncoding(t *testing.T) {
	tok := MakeToken(MmapPIOCred, 0x25, 3, 0xffff_ffff_8000_0a28)
	if uint64(tok) != 0xdabbad00_03_25_3_a28 {
		t.Fatalf("token %#x", uint64(tok))
	}
	if !tok.Valid() || tok.Magic() != TokenMagic || tok.Type() != MmapPIOCred ||
		tok.Ctxt() != 0x25 || tok.Subctxt() != 3 || tok.PageOffset() != 0xa28 {
		t.Errorf("decode: magic %#x type %v ctxt %d sub %d off %#x",
			tok.Magic(), tok.Type(), tok.Ctxt(), tok.Subctxt(), tok.PageOffset())
	}
	if uint64(tok.MapOffset()) != 0xdabbad00_03_25_3_000 {
		t.Errorf("MapOffset %#x", tok.MapOffset())
	}
	// Fields are masked to their widths, as HFI1_MMAP_TOKEN_SET does.
	tok = MakeToken(0x1f, 0x1ff, 0x1f, 0)
	if tok.Type() != 0xf || tok.Ctxt() != 0xff || tok.Subctxt() != 0xf || tok.Magic() != TokenMagic {
		t.Errorf("masking: %#x", uint64(tok))
	}
	if Token(0x12345678_06_01_0_000).Valid() {
		t.Error("wrong magic accepted")
	}
	for ty := MmapPIOBufs; ty <= MmapRcvRHEQ; ty++ {
		if ty.String() == "mmap(unknown)" {
			t.Errorf("type %d unnamed", ty)
		}
	}
}

// hfi1-abi.md §1 region table, with the driver defaults (2048 hdrq entries
// of 32 DW, SDMA ring of 128).
func TestRegionLen(t *testing.T) {
	ci := &CtxtInfo{Credits: 161, RcvHdrqCnt: 2048, RcvHdrqEntSize: 128,
		EgrTIDs: 256, RcvEgrSize: 32768, SDMARingSize: 128}
	for _, c := range []struct {
		ty   MmapType
		chip Chip
		want int
	}{
		{MmapPIOBufs, ChipWFR, 12288}, // PAGE_ALIGN(161*64 = 10304)
		{MmapPIOBufsSOP, ChipWFR, 12288},
		{MmapPIOCred, ChipWFR, 4096},
		{MmapRcvHdrQ, ChipWFR, 262144},
		{MmapRcvEgrBuf, ChipWFR, 8 << 20},
		{MmapURegs, ChipWFR, 4096},
		{MmapURegs, ChipJKR, 8192},
		{MmapEvents, ChipWFR, 4096},
		{MmapStatus, ChipWFR, 4096},
		{MmapRTail, ChipWFR, 4096},
		{MmapSDMAComp, ChipWFR, 4096},
		{MmapRcvRHEQ, ChipWFR, 0},
		{MmapRcvRHEQ, ChipJKR, 16384},
		{MmapSubctxtURegs, ChipWFR, 0},
	} {
		if got := RegionLen(c.ty, ci, c.chip); got != c.want {
			t.Errorf("%v on %v: %d, want %d", c.ty, c.chip, got, c.want)
		}
	}
	if RegionProt(MmapPIOBufsSOP) != ProtWrite || RegionProt(MmapURegs) != ProtRead|ProtWrite ||
		RegionProt(MmapPIOCred) != ProtRead || RegionProt(MmapRcvEgrBuf) != ProtRead {
		t.Error("protections drifted from the spec's table")
	}
}

func TestProtMatchesLinux(t *testing.T) {
	if ProtRead != unix.PROT_READ || ProtWrite != unix.PROT_WRITE || MapShared != unix.MAP_SHARED {
		t.Error("prot/flag constants differ from Linux")
	}
	if PageSize != unix.Getpagesize() {
		t.Skipf("page size %d: tokens assume 4 KiB pages", unix.Getpagesize())
	}
}
