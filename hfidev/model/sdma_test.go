package model

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// sdmaReq is a valid EAGER request for ctxt: iov[0] (info + template) and
// data iovecs of the given lengths, fragments of frag bytes.
func sdmaReq(cfg *Config, ctxt, slot uint16, frag int, lens ...int) [][]byte {
	total := 0
	iov := [][]byte{make([]byte, abi.SDMAReqInfoSize+abi.PktHeaderSize)}
	for _, n := range lens {
		iov = append(iov, make([]byte, n))
		total += n
	}
	npkts := max(1, (total+frag-1)/frag)
	info := abi.SDMAReqInfo{
		Ctrl:  abi.MakeSDMACtrl(abi.SDMAReqVersion, abi.SDMAOpEager, uint8(len(iov))),
		NPkts: uint16(npkts), FragSize: uint16(frag), CompIdx: slot,
	}
	info.Marshal(iov[0])
	first := min(total, frag)
	lrh := uint16((56 + 4 + (first+3)&^3) / 4)
	t := abi.PktHeader(iov[0][abi.SDMAReqInfoSize:])
	t.SetPBC((&abi.PBCFields{LengthDWs: lrh + 1}).Encode(cfg.Chip))
	f := abi.Header9BFields{
		LNH: abi.LNHIBLocal, DLID: cfg.LID, SLID: cfg.LID, PktLen: lrh, BTHKDETHFields: abi.BTHKDETHFields{Opcode: 0xc0, PKey: 0xffff,
			QP: abi.KDETHQPPrefix<<16 | uint32(ctxt), PSN: 100, KVer: abi.KDETHVersion, JKey: cfg.JKey},
	}
	f.Encode(t.Header())
	return iov
}

func compSlot(c *context, slot uint16) (abi.SDMACompState, uint32) {
	w := loadWord(c.comp, int(slot)*abi.SDMACompEntrySize)
	return abi.SDMACompState(uint32(w)), uint32(w >> 32)
}

// countingUnit is a unit with one context assigned on fd, whose sent
// packets are counted in *sent.
func countingUnit(t *testing.T, cfg Config) (*Unit, int, *context, *int) {
	u := newUnit(t, cfg)
	sent := new(int)
	u.SetEgress(func(uint16, []byte) { *sent++ })
	fd := open(t, u)
	assign(t, u, fd)
	return u, fd, u.files[fd].ctxt, sent
}

// hfi1-abi.md §4 and [K] hfi1_write_iter / hfi1_user_sdma_process_request:
// the errno of every check, and whether the slot was claimed (ERROR with
// the errno written to it) or not (left alone).
func TestSDMAErrno(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	u, fd, c, sent := countingUnit(t, cfg)
	hdr := func(iov [][]byte) abi.Header9B { return abi.PktHeader(iov[0][abi.SDMAReqInfoSize:]).Header() }
	info := func(iov [][]byte, f func(*abi.SDMAReqInfo)) {
		var i abi.SDMAReqInfo
		i.Unmarshal(iov[0])
		f(&i)
		i.Marshal(iov[0])
	}
	for i, tc := range []struct {
		name    string
		mut     func(iov [][]byte) [][]byte
		want    error
		claimed bool
	}{
		{"short first iovec", func(iov [][]byte) [][]byte { iov[0] = iov[0][:71]; return iov }, unix.EINVAL, false},
		{"comp_idx beyond the ring", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.CompIdx = 128 })
			return iov
		}, unix.EINVAL, false},
		{"iovcnt 0", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.Ctrl &^= 0xff00 })
			return iov
		}, unix.EINVAL, false},
		{"iovcnt beyond the writev", func(iov [][]byte) [][]byte { return iov[:2] }, unix.EINVAL, false},
		{"fragsize 0", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.FragSize = 0 })
			return iov
		}, unix.EINVAL, false},
		{"npkts 0", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.NPkts = 0 })
			return iov
		}, unix.EINVAL, true},
		{"9 data iovecs", func(iov [][]byte) [][]byte {
			for range 7 {
				iov = append(iov, make([]byte, 64))
			}
			info(iov, func(r *abi.SDMAReqInfo) { r.Ctrl = abi.MakeSDMACtrl(1, abi.SDMAOpEager, 10) })
			return iov
		}, unix.EINVAL, true},
		{"not a KDETH opcode", func(iov [][]byte) [][]byte { hdr(iov)[8] = 0x04; return iov }, unix.EINVAL, true},
		{"VL not the SC's", func(iov [][]byte) [][]byte { hdr(iov)[0] = 3 << 4; return iov }, unix.EINVAL, true},
		{"P_Key not in the table", func(iov [][]byte) [][]byte { hdr(iov)[10] = 0x12; return iov }, unix.EINVAL, true},
		{"GRH", func(iov [][]byte) [][]byte { hdr(iov)[1] |= 3; return iov }, unix.EINVAL, true},
		{"fragsize not a multiple of 64", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.FragSize = 4000 })
			return iov
		}, unix.EINVAL, true},
		{"first packet longer than fragsize", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.FragSize = 1024 })
			return iov
		}, unix.EINVAL, true},
		{"more packets than data", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.NPkts = 5 })
			return iov
		}, unix.EFAULT, true},
		{"EXPECTED without a tidlist", func(iov [][]byte) [][]byte {
			info(iov, func(r *abi.SDMAReqInfo) { r.Ctrl = abi.MakeSDMACtrl(1, abi.SDMAOpExpected, 3) })
			return iov
		}, unix.EINVAL, true},
		{"EXPECTED, empty tidlist", func(iov [][]byte) [][]byte {
			iov = append(iov, nil)
			info(iov, func(r *abi.SDMAReqInfo) { r.Ctrl = abi.MakeSDMACtrl(1, abi.SDMAOpExpected, 4) })
			return iov
		}, unix.EINVAL, true},
		{"EXPECTED, a zero tidlist entry (0 bytes) for the first packet", func(iov [][]byte) [][]byte {
			iov = append(iov, make([]byte, 8))
			info(iov, func(r *abi.SDMAReqInfo) { r.Ctrl = abi.MakeSDMACtrl(1, abi.SDMAOpExpected, 4) })
			return iov
		}, unix.EINVAL, true},
	} {
		slot := uint16(i)
		iov := tc.mut(sdmaReq(&cfg, c.num, slot, 4096, 3000, 5000))
		before := *sent
		n, err := u.Writev(fd, iov)
		if !errors.Is(err, tc.want) || n != -1 {
			t.Errorf("%s: %d, %v; want %v", tc.name, n, err, tc.want)
		}
		st, code := compSlot(c, slot)
		if tc.claimed && (st != abi.SDMAError || code != uint32(tc.want.(unix.Errno))) {
			t.Errorf("%s: slot %d is %d/%d, want ERROR/%d", tc.name, slot, st, code, tc.want)
		}
		if !tc.claimed && st != abi.SDMAFree {
			t.Errorf("%s: slot %d touched: %d", tc.name, slot, st)
		}
		if *sent != before || c.sdma.nReqs != 0 || c.sdma.inUse[slot] {
			t.Errorf("%s: %d packets sent, %d requests in flight", tc.name, *sent-before, c.sdma.nReqs)
		}
	}

	// Engine down: ECOMM, in the slot too.
	u.SetSDMARunning(false)
	if _, err := u.Writev(fd, sdmaReq(&cfg, c.num, 40, 4096, 100)); !errors.Is(err, unix.ECOMM) {
		t.Errorf("engine down: %v", err)
	}
	if st, code := compSlot(c, 40); st != abi.SDMAError || code != uint32(unix.ECOMM) {
		t.Errorf("engine down: slot %d/%d", st, code)
	}
	u.SetSDMARunning(true)

	// Two requests in one writev: 2; the second bad: the error alone, the
	// first stays accepted and completes.
	two := append(sdmaReq(&cfg, c.num, 50, 4096, 100), sdmaReq(&cfg, c.num, 51, 4096, 200)...)
	if n, err := u.Writev(fd, two); n != 2 || err != nil {
		t.Errorf("two requests: %d, %v", n, err)
	}
	bad := sdmaReq(&cfg, c.num, 53, 4096, 200)
	bad[0][abi.SDMAReqInfoSize+abi.PktHeaderBTHOff] = 0 // BTH.Opcode
	if n, err := u.Writev(fd, append(sdmaReq(&cfg, c.num, 52, 4096, 100), bad...)); n != -1 || !errors.Is(err, unix.EINVAL) {
		t.Errorf("good then bad: %d, %v", n, err)
	}
	for slot, want := range map[uint16]abi.SDMACompState{50: abi.SDMAComplete, 51: abi.SDMAComplete, 52: abi.SDMAComplete, 53: abi.SDMAError} {
		if st, _ := compSlot(c, slot); st != want {
			t.Errorf("slot %d: %d, want %d", slot, st, want)
		}
	}

	// No context, no SDMA capability.
	fd2 := open(t, u)
	if _, err := u.Writev(fd2, sdmaReq(&cfg, c.num, 0, 4096)); !errors.Is(err, unix.EIO) {
		t.Errorf("no context: %v", err)
	}
	if _, err := u.Writev(fd, nil); !errors.Is(err, unix.EINVAL) {
		t.Errorf("no iovecs: %v", err)
	}
	noSDMA := DefaultConfig(abi.ChipWFR)
	noSDMA.Caps, noSDMA.SDMARingSize = 0, 0
	u2 := newUnit(t, noSDMA)
	fd3 := open(t, u2)
	assign(t, u2, fd3)
	if _, err := u2.Writev(fd3, sdmaReq(&noSDMA, 3, 0, 4096)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("without CapSDMA: %v", err)
	}
}

// A held slot is busy (EBADSLT); a ring of held requests is full (ENOSPC);
// held completions can be released newest first.
func TestSDMASlots(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	cfg.SDMARingSize = 8
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	u.HoldSDMACompletions(true)
	for slot := range uint16(8) {
		if _, err := u.Writev(fd, sdmaReq(&cfg, c.num, slot, 4096, 64)); err != nil {
			t.Fatal(err)
		}
		if st, _ := compSlot(c, slot); st != abi.SDMAQueued {
			t.Fatalf("slot %d: %d, want QUEUED", slot, st)
		}
		if slot == 3 {
			if _, err := u.Writev(fd, sdmaReq(&cfg, c.num, 3, 4096, 64)); !errors.Is(err, unix.EBADSLT) {
				t.Fatalf("busy slot: %v", err)
			}
		}
	}
	if _, err := u.Writev(fd, sdmaReq(&cfg, c.num, 0, 4096, 64)); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("full ring: %v", err)
	}
	if n := u.ReleaseSDMACompletions(2, true); n != 2 {
		t.Fatalf("released %d", n)
	}
	for slot := range uint16(8) {
		want := abi.SDMAQueued
		if slot >= 6 {
			want = abi.SDMAComplete
		}
		if st, _ := compSlot(c, slot); st != want {
			t.Errorf("slot %d: %d, want %d", slot, st, want)
		}
	}
	if n := u.ReleaseSDMACompletions(-1, false); n != 6 || c.sdma.nReqs != 0 {
		t.Errorf("released %d, %d in flight", n, c.sdma.nReqs)
	}
}

// FuzzWritev: any first iovec over any data never panics; the answer is an
// errno, ErrNotModeled or success, and the slot bookkeeping stays sound.
func FuzzWritev(f *testing.F) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.RcvHdrqCnt, cfg.EgrTIDs, cfg.UserContexts = 32, 4, 1 // small units: fast iterations
	f.Add(sdmaReq(&cfg, 3, 1, 4096, 3000, 5000)[0], 8000, uint8(2))
	f.Add(make([]byte, 72), 0, uint8(0))
	f.Fuzz(func(t *testing.T, req []byte, dataLen int, iovs uint8) {
		u, err := NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		u.SetEgress(func(_ uint16, pkt []byte) {
			if abi.PBC(le.Uint64(pkt)).LengthDWs()*4 != uint16(len(pkt)) {
				t.Fatalf("packet of %d bytes, PBC says %d dwords", len(pkt), abi.PBC(le.Uint64(pkt)).LengthDWs())
			}
		})
		fd, _ := u.Open(u.Path(), unix.O_RDWR)
		b := make([]byte, abi.UserInfoSize)
		(&abi.UserInfo{UserVersion: abi.UserVersion}).Marshal(b)
		if err := u.Ioctl(fd, abi.IoctlAssignCtxt, b); err != nil {
			t.Fatal(err)
		}
		iov := [][]byte{req}
		per := (dataLen & 0xffff) / (int(iovs%10) + 1)
		for range int(iovs % 10) {
			iov = append(iov, make([]byte, per))
		}
		n, err := u.Writev(fd, iov)
		var errno unix.Errno
		if err != nil && !errors.As(err, &errno) && !errors.Is(err, ErrNotModeled) {
			t.Fatalf("error %v", err)
		}
		if (err == nil) != (n >= 1) {
			t.Fatalf("n %d with %v", n, err)
		}
		q := u.files[fd].ctxt.sdma
		inUse := 0
		for _, b := range q.inUse {
			if b {
				inUse++
			}
		}
		if inUse != q.nReqs || q.nReqs != 0 {
			t.Fatalf("%d slots in use, n_reqs %d", inUse, q.nReqs)
		}
	})
}
