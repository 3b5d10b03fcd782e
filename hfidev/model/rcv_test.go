package model

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// kdeth builds a 9B KDETH packet of n payload bytes for context ctxt.
func kdeth(cfg *Config, ctxt uint16, n int, fill byte) []byte {
	pkt := make([]byte, abi.Header9BSize+n)
	f := abi.Header9BFields{
		LNH: abi.LNHIBLocal, DLID: cfg.LID, SLID: 7, PktLen: uint16(len(pkt)/4 + 1),
		BTHKDETHFields: abi.BTHKDETHFields{Opcode: 0xc0, QP: abi.KDETHQPPrefix<<16 | uint32(ctxt), KVer: abi.KDETHVersion, JKey: cfg.JKey},
	}
	f.Encode(pkt)
	for i := range n {
		pkt[abi.Header9BSize+i] = fill + byte(i)
	}
	return pkt
}

// kdeth16B builds a 16B KDETH packet of n payload bytes (a multiple of 8)
// for context ctxt, with its tail quadword (zeros).
func kdeth16B(cfg *Config, ctxt uint16, n int, fill byte) []byte {
	pkt := make([]byte, abi.Header16BSize+n+abi.Tail16BSize)
	f := abi.Header16BFields{SLID: 7, DLID: uint32(cfg.LID), PktLen: abi.PktLen16B(n), L2: abi.L2Type16B, L4: abi.L4IBLocal}
	f.BTHKDETH = abi.BTHKDETHFields{Opcode: 0xc0, QP: abi.KDETHQPPrefix<<16 | uint32(ctxt), KVer: abi.KDETHVersion, JKey: cfg.JKey}
	f.Encode(pkt)
	for i := range n {
		pkt[abi.Header16BSize+i] = fill + byte(i)
	}
	return pkt
}

// The bytes the chip writes, where hfi1-abi.md §3 puts them: the header at
// HdrqOffset 2 dwords into the entry, the RHF in the entry's last 8 bytes
// (RcvSeq at [31:28] on WFR, [59:56] on JKR), the payload and a zero ICRC
// in the eager buffer; with DMA_RTAIL the tail's dword offset on the RTAIL
// page and in RcvHdrTail.
func TestRcvEntryBytes(t *testing.T) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		cfg := DefaultConfig(chip)
		cfg.Caps |= abi.CapDMARtail
		u := newUnit(t, cfg)
		fd := open(t, u)
		assign(t, u, fd)
		c := u.files[fd].ctxt
		for i := range 14 {
			u.Ingress(kdeth(&cfg, c.num, 100, byte(i)))
		}
		ent := int(cfg.RcvHdrqEntSize)
		for i := range 14 {
			e := c.hdrq[i*ent : (i+1)*ent]
			rhf := binary.LittleEndian.Uint64(e[ent-8:])
			var seq uint64
			if chip == abi.ChipWFR {
				seq = rhf >> 28 & 0xf
			} else {
				seq = rhf >> 56 & 0xf
			}
			if seq != uint64(i%13+1) || rhf>>44&0x1ff != 2 || rhf&0xfff != (56+100)/4+1 || rhf>>12&7 != 1 || rhf>>15&1 != 1 {
				t.Errorf("%v entry %d: RHF %#x", chip, i, rhf)
			}
			if !bytes.Equal(e[8:64], kdeth(&cfg, c.num, 100, byte(i))[:56]) {
				t.Errorf("%v entry %d: header not at dword 2", chip, i)
			}
			egrOff := int(rhf>>32&0xfff) * 64
			if !bytes.Equal(c.egr[egrOff:egrOff+100], kdeth(&cfg, c.num, 100, byte(i))[56:]) ||
				binary.LittleEndian.Uint32(c.egr[egrOff+100:]) != 0 {
				t.Errorf("%v entry %d: payload not at offset %d", chip, i, egrOff)
			}
		}
		tail := uint64(14 * ent / 4)
		if binary.LittleEndian.Uint64(c.rtail) != tail || binary.LittleEndian.Uint64(c.uregs[abi.URegRcvHdrTail:]) != tail {
			t.Errorf("%v: tail %d / %d, want %d", chip, binary.LittleEndian.Uint64(c.rtail),
				binary.LittleEndian.Uint64(c.uregs[abi.URegRcvHdrTail:]), tail)
		}
		if chip == abi.ChipJKR && binary.LittleEndian.Uint64(c.rheq) != 0 {
			t.Errorf("JKR: RHE of a clean packet %#x", binary.LittleEndian.Uint64(c.rheq))
		}
	}
}

func TestConfigReceiveLimits(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.RcvHdrqCnt = 13 * 32 },
		func(c *Config) { c.RcvHdrqEntSize = 64 },
		func(c *Config) { c.Caps |= abi.CapNoDropRHQFull },
		func(c *Config) { c.RcvEgrSize = 4096 }, // smaller than 161 credits
	} {
		cfg := DefaultConfig(abi.ChipWFR)
		mut(&cfg)
		if _, err := NewUnit(cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}

// FuzzIngress: whatever arrives from the link, the model never panics and
// never writes an entry whose RHF points outside the queue entry or the
// eager buffers; every packet is counted exactly once.
func FuzzIngress(f *testing.F) {
	cfg := DefaultConfig(abi.ChipJKR)
	cfg.RcvHdrqCnt, cfg.EgrTIDs = 32, 4
	f.Add(kdeth(&cfg, 3, 100, 1), uint16(3))
	f.Add(kdeth(&cfg, 3, 0, 1), uint16(0))
	f.Add([]byte{1, 2, 3}, uint16(9))
	f.Add(kdeth16B(&cfg, 3, 96, 1), uint16(2))
	f.Add(kdeth16B(&cfg, 3, 0, 1), uint16(3))
	f.Fuzz(func(t *testing.T, pkt []byte, ctxt uint16) {
		u, err := NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fd, _ := u.Open(u.Path(), 2)
		b := make([]byte, abi.UserInfoSize)
		(&abi.UserInfo{UserVersion: abi.UserVersion}).Marshal(b)
		if err := u.Ioctl(fd, abi.IoctlAssignCtxt, b); err != nil {
			t.Fatal(err)
		}
		c := u.files[fd].ctxt
		as16B := ctxt&2 != 0 // half the time it arrives as 16B (Ingress16B)
		switch {
		case as16B && len(pkt) >= abi.Header16BSize && ctxt&1 == 0:
			// Half of those, aim it at the context.
			h := abi.Header16B(pkt)
			f := h.Decode()
			f.DLID, f.L2, f.L4 = uint32(cfg.LID), abi.L2Type16B, abi.L4IBLocal
			f.BTHKDETH.QP = abi.KDETHQPPrefix<<16 | uint32(c.num)
			f.Encode(h)
		case !as16B && len(pkt) >= abi.Header9BSize && ctxt&1 == 0:
			pkt[2], pkt[3] = byte(cfg.LID>>8), byte(cfg.LID)
			pkt[13], pkt[15] = abi.KDETHQPPrefix, byte(c.num)
		}
		for range 40 { // past a full queue and full eager buffers
			if as16B {
				u.Ingress16B(pkt)
			} else {
				u.Ingress(pkt)
			}
		}
		s := u.IngressStats()
		if s.Received != 40 || s.Delivered+s.Malformed+s.NotLocal+s.NotKDETH+s.NoContext+s.JKey+s.Bypass != 40 {
			t.Fatalf("counted %+v", s)
		}
		rs, _ := u.RcvStats(c.num)
		if rs.Packets+rs.HdrqFull != s.Delivered || (!as16B && rs.Packets16B != 0) || (as16B && rs.Packets16B != rs.Packets) {
			t.Fatalf("delivered %d, entries %+v", s.Delivered, rs)
		}
		l9 := abi.RcvLayout{Egr: c.egr, EgrSize: int(cfg.RcvEgrSize), EgrTIDs: int(cfg.EgrTIDs), HdrBytes: abi.Header9BSize}
		l16 := l9
		l16.HdrBytes, l16.TailBytes = abi.Header16BSize, abi.Tail16BSize
		ent := int(cfg.RcvHdrqEntSize)
		for i := range int(rs.Packets) {
			e := abi.HdrqEntry(c.hdrq[i*ent : (i+1)*ent])
			fl := abi.RHFJKR(binary.LittleEndian.Uint64(e[e.RHFOffset():])).Decode()
			l := &l9
			if fl.L2Type == abi.L2Type16B {
				l = &l16
			}
			if (fl.L2Type == abi.L2Type16B) != as16B {
				t.Fatalf("entry %d: L2Type %d", i, fl.L2Type)
			}
			if _, _, err := e.Split(&fl, l); err != nil {
				t.Fatalf("entry %d: %v (%+v)", i, err, fl)
			}
		}
	})
}
