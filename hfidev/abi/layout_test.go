package abi

import (
	"bytes"
	"testing"
	"unsafe"
)

// Sizes and offsets from hfi1-abi.md §1 "Struct layouts" ([K] hfi1_ioctl.h),
// checked against the Go structs (so unsafe views would agree) and against
// the byte images Marshal produces (what the ioctl actually carries).

type off struct {
	name string
	got  uintptr
	want uintptr
}

func checkOffsets(t *testing.T, offs []off) {
	t.Helper()
	for _, o := range offs {
		if o.got != o.want {
			t.Errorf("%s at %d, spec says %d", o.name, o.got, o.want)
		}
	}
}

func TestStructSizes(t *testing.T) {
	for _, c := range []struct {
		name       string
		got, want  uintptr
		constWant  int
		constValue int
	}{
		{"hfi1_user_info", unsafe.Sizeof(UserInfo{}), 28, 28, UserInfoSize},
		{"hfi1_ctxt_info", unsafe.Sizeof(CtxtInfo{}), 40, 40, CtxtInfoSize},
		{"hfi1_base_info", unsafe.Sizeof(BaseInfo{}), 120, 120, BaseInfoSize},
		{"hfi1_tid_info", unsafe.Sizeof(TIDInfo{}), 24, 24, TIDInfoSize},
		{"sdma_req_info", unsafe.Sizeof(SDMAReqInfo{}), 8, 8, SDMAReqInfoSize},
		{"hfi1_sdma_comp_entry", unsafe.Sizeof(SDMACompEntry{}), 8, 8, SDMACompEntrySize},
	} {
		if c.got != c.want || c.constValue != c.constWant {
			t.Errorf("%s: Sizeof %d, constant %d; spec says %d", c.name, c.got, c.constValue, c.want)
		}
	}
	if PktHeaderSize != 64 || KDETHHeaderSize != 36 || Header9BSize != 56 {
		t.Errorf("header sizes %d/%d/%d, spec says 64/36/56", PktHeaderSize, KDETHHeaderSize, Header9BSize)
	}
	if PktHeaderKDETHOff+KDETHHeaderSize != PktHeaderSize {
		t.Errorf("pbc[4]+lrh[4]+bth[3]+kdeth = %d, want 64", PktHeaderKDETHOff+KDETHHeaderSize)
	}
}

func TestUserInfoLayout(t *testing.T) {
	var u UserInfo
	checkOffsets(t, []off{
		{"userversion", unsafe.Offsetof(u.UserVersion), 0},
		{"pad", unsafe.Offsetof(u.Pad), 4},
		{"subctxt_cnt", unsafe.Offsetof(u.SubctxtCnt), 8},
		{"subctxt_id", unsafe.Offsetof(u.SubctxtID), 10},
		{"uuid", unsafe.Offsetof(u.UUID), 12},
	})
	u = UserInfo{UserVersion: 0x00060003, Pad: 0x11223344, SubctxtCnt: 0x0506, SubctxtID: 0x0708}
	for i := range u.UUID {
		u.UUID[i] = byte(0xa0 + i)
	}
	b := make([]byte, UserInfoSize)
	u.Marshal(b)
	want := []byte{3, 0, 6, 0, 0x44, 0x33, 0x22, 0x11, 6, 5, 8, 7,
		0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf}
	if !bytes.Equal(b, want) {
		t.Errorf("image\n got %x\nwant %x", b, want)
	}
	var r UserInfo
	r.Unmarshal(b)
	if r != u {
		t.Errorf("round trip: %+v != %+v", r, u)
	}
}

func TestCtxtInfoLayout(t *testing.T) {
	var c CtxtInfo
	checkOffsets(t, []off{
		{"runtime_flags", unsafe.Offsetof(c.RuntimeFlags), 0},
		{"rcvegr_size", unsafe.Offsetof(c.RcvEgrSize), 8},
		{"num_active", unsafe.Offsetof(c.NumActive), 12},
		{"unit", unsafe.Offsetof(c.Unit), 14},
		{"ctxt", unsafe.Offsetof(c.Ctxt), 16},
		{"subctxt", unsafe.Offsetof(c.Subctxt), 18},
		{"rcvtids", unsafe.Offsetof(c.RcvTIDs), 20},
		{"credits", unsafe.Offsetof(c.Credits), 22},
		{"numa_node", unsafe.Offsetof(c.NumaNode), 24},
		{"rec_cpu", unsafe.Offsetof(c.RecCPU), 26},
		{"send_ctxt", unsafe.Offsetof(c.SendCtxt), 28},
		{"egrtids", unsafe.Offsetof(c.EgrTIDs), 30},
		{"rcvhdrq_cnt", unsafe.Offsetof(c.RcvHdrqCnt), 32},
		{"rcvhdrq_entsize", unsafe.Offsetof(c.RcvHdrqEntSize), 34},
		{"sdma_ring_size", unsafe.Offsetof(c.SDMARingSize), 36},
	})
	c = CtxtInfo{RuntimeFlags: 0x0102030405060708, RcvEgrSize: 0x11121314,
		NumActive: 0x2122, Unit: 0x2324, Ctxt: 0x2526, Subctxt: 0x2728, RcvTIDs: 0x292a,
		Credits: 0x2b2c, NumaNode: 0x2d2e, RecCPU: 0x2f30, SendCtxt: 0x3132, EgrTIDs: 0x3334,
		RcvHdrqCnt: 0x3536, RcvHdrqEntSize: 0x3738, SDMARingSize: 0x393a}
	b := bytes.Repeat([]byte{0xee}, CtxtInfoSize)
	c.Marshal(b)
	// Each u16 lands little-endian at its offset, and the padding is zeroed.
	for _, p := range []struct {
		at   int
		want uint16
	}{{12, 0x2122}, {14, 0x2324}, {16, 0x2526}, {18, 0x2728}, {20, 0x292a}, {22, 0x2b2c},
		{24, 0x2d2e}, {26, 0x2f30}, {28, 0x3132}, {30, 0x3334}, {32, 0x3536}, {34, 0x3738},
		{36, 0x393a}, {38, 0}} {
		if got := le.Uint16(b[p.at:]); got != p.want {
			t.Errorf("u16 at %d = %#x, want %#x", p.at, got, p.want)
		}
	}
	if le.Uint64(b) != c.RuntimeFlags || le.Uint32(b[8:]) != c.RcvEgrSize {
		t.Errorf("u64/u32 head wrong: %x", b[:12])
	}
	var r CtxtInfo
	r.Unmarshal(b)
	if r != c {
		t.Errorf("round trip: %+v != %+v", r, c)
	}
}

func TestBaseInfoLayout(t *testing.T) {
	var bi BaseInfo
	checkOffsets(t, []off{
		{"hw_version", unsafe.Offsetof(bi.HWVersion), 0},
		{"sw_version", unsafe.Offsetof(bi.SWVersion), 4},
		{"jkey", unsafe.Offsetof(bi.JKey), 8},
		{"bthqp", unsafe.Offsetof(bi.BTHQP), 12},
		{"sc_credits_addr", unsafe.Offsetof(bi.SCCreditsAddr), 16},
		{"pio_bufbase_sop", unsafe.Offsetof(bi.PIOBufBaseSOP), 24},
		{"pio_bufbase", unsafe.Offsetof(bi.PIOBufBase), 32},
		{"rcvhdr_bufbase", unsafe.Offsetof(bi.RcvHdrBufBase), 40},
		{"rcvegr_bufbase", unsafe.Offsetof(bi.RcvEgrBufBase), 48},
		{"sdma_comp_bufbase", unsafe.Offsetof(bi.SDMACompBufBase), 56},
		{"user_regbase", unsafe.Offsetof(bi.UserRegBase), 64},
		{"events_bufbase", unsafe.Offsetof(bi.EventsBufBase), 72},
		{"status_bufbase", unsafe.Offsetof(bi.StatusBufBase), 80},
		{"rcvhdrtail_base", unsafe.Offsetof(bi.RcvHdrTailBase), 88},
		{"subctxt_uregbase", unsafe.Offsetof(bi.SubctxtURegBase), 96},
		{"subctxt_rcvegrbuf", unsafe.Offsetof(bi.SubctxtRcvEgr), 104},
		{"subctxt_rcvhdrbuf", unsafe.Offsetof(bi.SubctxtRcvHdr), 112},
	})
	bi = BaseInfo{HWVersion: 0x03000701, SWVersion: UserVersion, JKey: 0xbeef, BTHQP: KDETHQPPrefix}
	for i, tp := range bi.tokens() {
		*tp = Token(0x1000 + i)
	}
	b := make([]byte, BaseInfoSize)
	bi.Marshal(b)
	wantTok := map[int]uint64{16: 0x1000, 24: 0x1001, 32: 0x1002, 40: 0x1003, 48: 0x1004,
		56: 0x1005, 64: 0x1006, 72: 0x1007, 80: 0x1008, 88: 0x1009, 96: 0x100a, 104: 0x100b, 112: 0x100c}
	for at, w := range wantTok {
		if got := le.Uint64(b[at:]); got != w {
			t.Errorf("token at %d = %#x, want %#x", at, got, w)
		}
	}
	if le.Uint16(b[8:]) != 0xbeef || le.Uint32(b[12:]) != 0x80 || le.Uint32(b[4:]) != 0x60003 {
		t.Errorf("head wrong: %x", b[:16])
	}
	var r BaseInfo
	r.Unmarshal(b)
	if r != bi {
		t.Errorf("round trip: %+v != %+v", r, bi)
	}
}

func TestTIDInfoLayout(t *testing.T) {
	var ti TIDInfo
	checkOffsets(t, []off{
		{"vaddr", unsafe.Offsetof(ti.VAddr), 0},
		{"tidlist", unsafe.Offsetof(ti.TIDList), 8},
		{"tidcnt", unsafe.Offsetof(ti.TIDCnt), 16},
		{"length", unsafe.Offsetof(ti.Length), 20},
	})
	ti = TIDInfo{VAddr: 0x7f0000001000, TIDList: 0x7f0000002000, TIDCnt: 3, Length: 0x3000}
	b := make([]byte, TIDInfoSize)
	ti.Marshal(b)
	if le.Uint64(b) != ti.VAddr || le.Uint64(b[8:]) != ti.TIDList || le.Uint32(b[16:]) != 3 || le.Uint32(b[20:]) != 0x3000 {
		t.Errorf("image %x", b)
	}
	var r TIDInfo
	r.Unmarshal(b)
	if r != ti {
		t.Errorf("round trip: %+v != %+v", r, ti)
	}
}

// hfi1-abi.md §4: ctrl holds version [3:0], opcode [7:4], iovcnt [15:8],
// then npkts, fragsize, comp_idx, packed in 8 bytes.
func TestSDMAReqInfo(t *testing.T) {
	var r SDMAReqInfo
	checkOffsets(t, []off{
		{"ctrl", unsafe.Offsetof(r.Ctrl), 0},
		{"npkts", unsafe.Offsetof(r.NPkts), 2},
		{"fragsize", unsafe.Offsetof(r.FragSize), 4},
		{"comp_idx", unsafe.Offsetof(r.CompIdx), 6},
	})
	r = SDMAReqInfo{Ctrl: MakeSDMACtrl(1, SDMAOpEager, 9), NPkts: 4, FragSize: 4096, CompIdx: 127}
	if r.Ctrl != 0x0911 || r.Version() != 1 || r.Opcode() != SDMAOpEager || r.IovCnt() != 9 {
		t.Errorf("ctrl %#x: v%d op%d iov%d", r.Ctrl, r.Version(), r.Opcode(), r.IovCnt())
	}
	b := make([]byte, SDMAReqInfoSize)
	r.Marshal(b)
	if !bytes.Equal(b, []byte{0x11, 0x09, 4, 0, 0, 0x10, 127, 0}) {
		t.Errorf("image %x", b)
	}
	var g SDMAReqInfo
	g.Unmarshal(b)
	if g != r {
		t.Errorf("round trip %+v != %+v", g, r)
	}
	var c SDMACompEntry
	checkOffsets(t, []off{
		{"status", unsafe.Offsetof(c.Status), 0},
		{"errcode", unsafe.Offsetof(c.ErrCode), 4},
	})
	if SDMAFree != 0 || SDMAQueued != 1 || SDMAComplete != 2 || SDMAError != 3 {
		t.Error("hfi1_sdma_comp_state values drifted")
	}
}

func TestVersion(t *testing.T) {
	if UserVersion != 0x00060003 {
		t.Errorf("UserVersion %#x, spec says 0x00060003", UserVersion)
	}
	v := MakeHWVersion(ChipJKR, 4, 1)
	if v.Chip() != ChipJKR || v.SWInterface() != 4 || v.Minor() != 1 || v != 0x04000801 {
		t.Errorf("hw_version %#x: chip %v sw %d minor %d", uint32(v), v.Chip(), v.SWInterface(), v.Minor())
	}
}
