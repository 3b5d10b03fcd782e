package model

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// expectedReq turns sdmaReq's EAGER request into an EXPECTED one with
// tidlist tids, the template naming tids[0] at byte off.
func expectedReq(cfg *Config, ctxt, slot uint16, frag int, tids []abi.TIDEntry, off int, lens ...int) [][]byte {
	iov := sdmaReq(cfg, ctxt, slot, frag, lens...)
	list := make(abi.TIDList, 4*len(tids))
	for i, e := range tids {
		list.Set(i, e)
	}
	iov = append(iov, list)
	var info abi.SDMAReqInfo
	info.Unmarshal(iov[0])
	info.Ctrl = abi.MakeSDMACtrl(abi.SDMAReqVersion, abi.SDMAOpExpected, uint8(len(iov)))
	info.Marshal(iov[0])
	if len(tids) > 0 {
		abi.PktHeader(iov[0][abi.SDMAReqInfoSize:]).Header().SetKDETHTID(tids[0], off)
	}
	return iov
}

// check_header_template's EXPECTED checks and set_txreq_header's: the
// first packet must fit its entry from the template's offset and the
// template must name tidlist[0]; data beyond the list is "request has data
// but pkt len is 0" (EFAULT). All claim the slot and write ERROR.
func TestSDMAExpectedErrno(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	u, fd, c, sent := countingUnit(t, cfg)
	one := abi.TIDEntryFor(0, 1) // one page
	for i, tc := range []struct {
		name string
		iov  [][]byte
		want unix.Errno
	}{
		{"first packet past its entry", expectedReq(&cfg, c.num, 0, 4096, []abi.TIDEntry{one}, 64, 4096), unix.EINVAL},
		{"template names another TID", func() [][]byte {
			iov := expectedReq(&cfg, c.num, 1, 4096, []abi.TIDEntry{one}, 0, 4096)
			abi.PktHeader(iov[0][abi.SDMAReqInfoSize:]).Header().SetKDETHTID(abi.TIDEntryFor(1, 1), 0)
			return iov
		}(), unix.EINVAL},
		{"data beyond the tidlist", expectedReq(&cfg, c.num, 2, 4096, []abi.TIDEntry{one, one}, 0, 3*4096), unix.EFAULT},
		{"a zero entry ends the list", expectedReq(&cfg, c.num, 3, 4096, []abi.TIDEntry{one, 0, one}, 0, 3*4096), unix.EFAULT},
	} {
		if i == 2 || i == 3 {
			// Three packets for three pages of data.
			var info abi.SDMAReqInfo
			info.Unmarshal(tc.iov[0])
			info.NPkts = 3
			info.Marshal(tc.iov[0])
		}
		n, err := u.Writev(fd, tc.iov)
		if !errors.Is(err, tc.want) || n != -1 {
			t.Errorf("%s: %d, %v; want %v", tc.name, n, err, tc.want)
		}
		if st, code := compSlot(c, uint16(i)); st != abi.SDMAError || code != uint32(tc.want) {
			t.Errorf("%s: slot %d is %d/%d", tc.name, i, st, code)
		}
	}
	if *sent != 0 {
		t.Errorf("%d packets of failing requests sent", *sent)
	}
}

// FuzzWritevExpected: any EXPECTED request — template KDETH word, tidlist,
// fragment, packet count, data — into a peer with a programmed buffer
// never panics, and the peer's chip writes nowhere but inside that buffer
// (the pages around it keep their fill).
func FuzzWritevExpected(f *testing.F) {
	cfg := DefaultConfig(abi.ChipWFR) // sdmaReq's PBC is WFR's
	cfg.RcvHdrqCnt, cfg.EgrTIDs, cfg.UserContexts, cfg.TIDPhysRunPages = 64, 4, 1, 2
	// Valid: 8000 bytes into entries 0 and 1 (two pages each); then a
	// template at offset 20 of entry 0 in 64-byte fragments.
	f.Add(uint32(1<<30|1<<26), []byte{0x02, 0, 0x10, 0, 0x02, 0, 0x20, 0}, uint16(4096), uint16(2), 8000)
	f.Add(uint32(1<<30|1<<26|5), []byte{0x02, 0, 0x10, 0}, uint16(64), uint16(1), 64)
	f.Fuzz(func(t *testing.T, kdeth0 uint32, tidlist []byte, frag, npkts uint16, dataLen int) {
		a, err := NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewUnit(cfg)
		Connect(a, b)
		fa, fb := open(t, a), open(t, b)
		assign(t, a, fa)
		assign(t, b, fb)
		rx := &tidCtx{t: t, u: b, fd: fb, c: b.files[fb].ctxt, list: make([]uint32, 64)}
		mem := pages(t, 8*abi.PageSize)
		for i := range mem {
			mem[i] = 0xee
		}
		if _, err := rx.update(addr(mem[abi.PageSize:]), 6*abi.PageSize); err != nil {
			t.Fatal(err)
		}
		iov := sdmaReq(&cfg, rx.c.num, 0, 4096, dataLen&0x3ffff)
		var info abi.SDMAReqInfo
		info.Unmarshal(iov[0])
		info.Ctrl = abi.MakeSDMACtrl(abi.SDMAReqVersion, abi.SDMAOpExpected, 3)
		info.FragSize, info.NPkts = frag, npkts
		info.Marshal(iov[0])
		le.PutUint32(iov[0][abi.SDMAReqInfoSize+abi.PBCSize+abi.LRH9BSize+abi.BTHSize:], kdeth0)
		iov = append(iov, tidlist)
		fillIn(iov[1])
		if _, err := a.Writev(fa, iov); err != nil && !isErrno(err) {
			t.Fatalf("error %v", err)
		}
		for _, p := range [][]byte{mem[:abi.PageSize], mem[7*abi.PageSize:]} {
			for _, v := range p {
				if v != 0xee {
					t.Fatal("the chip wrote outside the programmed buffer")
				}
			}
		}
	})
}

func fillIn(b []byte) {
	for i := range b {
		b[i] = byte(i)
	}
}
