package model

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// A 16B packet on JKR: the header at the start of the entry (HdrqOffset
// 0), RHF.L2Type 16B, RHF.PktLen in dwords with the tail quadword, the
// payload and eight zero bytes in the eager buffer; 9B packets in the same
// queue keep their layout.
func TestRcv16BEntryBytes(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	for i := range 6 {
		if i%2 == 0 {
			u.Ingress16B(kdeth16B(&cfg, c.num, 8*i+96, byte(i)))
		} else {
			u.Ingress(kdeth(&cfg, c.num, 100, byte(i)))
		}
	}
	ent := int(cfg.RcvHdrqEntSize)
	for i := range 6 {
		e := c.hdrq[i*ent : (i+1)*ent]
		rhf := abi.RHFJKR(binary.LittleEndian.Uint64(e[ent-8:]))
		egrOff := int(rhf.EgrOffset()) * 64
		if i%2 == 1 {
			if rhf.L2Type() != abi.L2Type9B || rhf.HdrqOffset() != abi.HdrqOffset9B || !bytes.Equal(e[8:64], kdeth(&cfg, c.num, 100, byte(i))[:56]) {
				t.Errorf("9B entry %d: RHF %#x", i, uint64(rhf))
			}
			continue
		}
		n := 8*i + 96
		pkt := kdeth16B(&cfg, c.num, n, byte(i))
		if rhf.L2Type() != abi.L2Type16B || rhf.HdrqOffset() != 0 || int(rhf.PktLen()) != len(pkt)/4 ||
			rhf.RcvType() != abi.RcvTypeEager || !rhf.UseEgrBfr() || rhf.RHEValid() {
			t.Errorf("16B entry %d: RHF %+v", i, rhf.Decode())
		}
		if !bytes.Equal(e[:abi.Header16BSize], pkt[:abi.Header16BSize]) {
			t.Errorf("16B entry %d: header not at dword 0", i)
		}
		if !bytes.Equal(c.egr[egrOff:egrOff+n], pkt[abi.Header16BSize:abi.Header16BSize+n]) ||
			binary.LittleEndian.Uint64(c.egr[egrOff+n:]) != 0 {
			t.Errorf("16B entry %d: payload not at offset %d", i, egrOff)
		}
	}
	if rs, _ := u.RcvStats(c.num); rs.Packets != 6 || rs.Packets16B != 3 || rs.LenErr != 0 {
		t.Errorf("stats %+v", rs)
	}
	// A 16B LRH.PktLen that disagrees with what arrived sets LenErr (in
	// the RHE on JKR).
	bad := kdeth16B(&cfg, c.num, 64, 0)
	abi.Header16B(bad).SetPktLen(abi.PktLen16B(56))
	u.Ingress16B(bad)
	rhf := abi.RHFJKR(binary.LittleEndian.Uint64(c.hdrq[7*ent-8:]))
	if !rhf.RHEValid() || !abi.RHE(binary.LittleEndian.Uint64(c.rheq[6*8:])).Has(abi.RHELenErr) {
		t.Errorf("LenErr not flagged: RHF %#x", uint64(rhf))
	}
}

// Ingress16B's checks, each counted: a WFR unit takes no 16B (Bypass);
// short, not dwords, not L2 16B (Malformed); another DLID, including one
// that differs only above bit 15 (NotLocal); L4 not IB local (NotKDETH).
func TestIngress16BDrops(t *testing.T) {
	wfr := DefaultConfig(abi.ChipWFR)
	uw := newUnit(t, wfr)
	assign(t, uw, open(t, uw))
	uw.Ingress16B(kdeth16B(&wfr, uint16(wfr.FirstUserCtxt), 64, 0))
	if s := uw.IngressStats(); s.Bypass != 1 || s.Delivered != 0 {
		t.Errorf("WFR: %+v", s)
	}
	cfg := DefaultConfig(abi.ChipJKR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	mod := func(f func(*abi.Header16BFields)) []byte {
		p := kdeth16B(&cfg, c.num, 64, 0)
		h := abi.Header16B(p).Decode()
		f(&h)
		h.Encode(p)
		return p
	}
	for _, p := range [][]byte{
		kdeth16B(&cfg, c.num, 0, 0)[:abi.Header16BSize+4],
		append(kdeth16B(&cfg, c.num, 0, 0), 1, 2),
		mod(func(h *abi.Header16BFields) { h.L2 = abi.L2Type9B }),
	} {
		u.Ingress16B(p)
	}
	u.Ingress16B(mod(func(h *abi.Header16BFields) { h.DLID |= 1 << 20 }))
	u.Ingress16B(mod(func(h *abi.Header16BFields) { h.L4 = abi.L4IBGlobal }))
	u.Ingress16B(mod(func(h *abi.Header16BFields) { h.BTHKDETH.KVer = 2 }))
	u.Ingress16B(kdeth16B(&cfg, c.num, 64, 0))
	if s := u.IngressStats(); s.Malformed != 3 || s.NotLocal != 1 || s.NotKDETH != 2 || s.Delivered != 1 || s.Received != 7 {
		t.Errorf("JKR: %+v", s)
	}
}

// sdmaReq16B is a valid 16B EAGER request for ctxt on JKR: iov[0] is info
// and a 72-byte template (PBC, 16B header), then one data iovec.
func sdmaReq16B(cfg *Config, ctxt, slot uint16, frag, total int) [][]byte {
	iov := [][]byte{make([]byte, abi.SDMAReqInfoSize+abi.PktHeader16BSize), make([]byte, total)}
	for i := range iov[1] {
		iov[1][i] = byte(i * 7)
	}
	info := abi.SDMAReqInfo{
		Ctrl:  abi.MakeSDMACtrl(abi.SDMAReqVersion, abi.SDMAOpEager, 2),
		NPkts: uint16(max(1, (total+frag-1)/frag)), FragSize: uint16(frag), CompIdx: slot,
	}
	info.Marshal(iov[0])
	t := abi.PktHeader(iov[0][abi.SDMAReqInfoSize:])
	t.SetPBC((&abi.PBCFields{L2Type: abi.L2Type16B}).Encode(cfg.Chip))
	f := abi.Header16BFields{SLID: uint32(cfg.LID), DLID: uint32(cfg.LID), PktLen: abi.PktLen16B(min(total, frag)),
		L2: abi.L2Type16B, L4: abi.L4IBLocal}
	f.BTHKDETH = abi.BTHKDETHFields{Opcode: 0xc0, PKey: 0xffff, QP: abi.KDETHQPPrefix<<16 | uint32(ctxt), PSN: 100,
		KVer: abi.KDETHVersion, JKey: cfg.JKey}
	f.Encode(t.Header16B())
	return iov
}

// 16B user SDMA as [C] hfi2 user_sdma.c does it: the template is PBC and
// 16B header; each packet's LRH.PktLen is in flits and counts the tail
// quadword the driver appends, PBC.LengthDWs is that in dwords plus the
// PBC; PSN, BTH.A and SWData[6] are rewritten as for 9B. Refused (the
// slot claimed, ERROR): a template whose LRH.L2 is not 16B, a GRH (L4),
// data not in whole quadwords, a first vector too short for a 16B
// template; on WFR a bypass PBC.
func TestSDMA16B(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	c := u.files[fd].ctxt
	var pkts [][]byte
	u.SetEgress(func(_ uint16, p []byte) { pkts = append(pkts, bytes.Clone(p)) })
	iov := sdmaReq16B(&cfg, c.num, 0, 4096, 4096*2+512)
	if n, err := u.Writev(fd, iov); n != 1 || err != nil {
		t.Fatalf("writev: %d %v", n, err)
	}
	if st, _ := compSlot(c, 0); st != abi.SDMAComplete || len(pkts) != 3 {
		t.Fatalf("status %v, %d packets", st, len(pkts))
	}
	for k, p := range pkts {
		n := min(4096, 4096*2+512-k*4096)
		pbc := abi.PBC(binary.LittleEndian.Uint64(p))
		h := abi.Header16B(p[abi.PBCSize:])
		tr := h.BTHKDETH()
		if len(p) != abi.PBCSize+abi.Header16BSize+n+abi.Tail16BSize || int(pbc.LengthDWs())*4 != len(p) ||
			pbc.L2Type() != abi.L2Type16B || int(h.PktLen()) != (abi.Header16BSize+n+abi.Tail16BSize)/8 {
			t.Errorf("packet %d: %d bytes, PBC %#x, PktLen %d", k, len(p), uint64(pbc), h.PktLen())
		}
		if tr.PSN() != uint32(100+k) || tr.AckReq() != (k == 2) || tr.SWData(6) != uint32(k*4096) {
			t.Errorf("packet %d: PSN %d A %v off %d", k, tr.PSN(), tr.AckReq(), tr.SWData(6))
		}
		if !bytes.Equal(p[abi.PBCSize+abi.Header16BSize:][:n], iov[1][k*4096:k*4096+n]) ||
			binary.LittleEndian.Uint64(p[len(p)-8:]) != 0 {
			t.Errorf("packet %d: payload or tail differs", k)
		}
	}
	slot := uint16(1)
	for _, tc := range []struct {
		name string
		mut  func(iov [][]byte) [][]byte
	}{
		{"LRH.L2 9B", func(iov [][]byte) [][]byte {
			h := abi.PktHeader(iov[0][abi.SDMAReqInfoSize:]).Header16B()
			f := h.Decode()
			f.L2 = abi.L2Type9B
			f.Encode(h)
			return iov
		}},
		{"GRH", func(iov [][]byte) [][]byte {
			h := abi.PktHeader(iov[0][abi.SDMAReqInfoSize:]).Header16B()
			f := h.Decode()
			f.L4 = abi.L4IBGlobal
			f.Encode(h)
			return iov
		}},
		{"not quadwords", func(iov [][]byte) [][]byte { iov[1] = iov[1][:4096+4]; return iov }},
		{"short template", func(iov [][]byte) [][]byte { iov[0] = iov[0][:abi.SDMAReqInfoSize+abi.PktHeaderSize]; return iov }},
	} {
		pkts = nil
		iov := tc.mut(sdmaReq16B(&cfg, c.num, slot, 4096, 8192))
		_, err := u.Writev(fd, iov)
		if st, errno := compSlot(c, slot); err != unix.EINVAL || st != abi.SDMAError || errno != uint32(unix.EINVAL) || len(pkts) != 0 {
			t.Errorf("%s: %v, slot %v/%d, %d packets", tc.name, err, st, errno, len(pkts))
		}
		slot++
	}
	// WFR: PacketBypass (16B) in the PBC is refused.
	wfr := DefaultConfig(abi.ChipWFR)
	uw, fdw, cw, sent := countingUnit(t, wfr)
	iovw := sdmaReq(&wfr, cw.num, 0, 4096, 64)
	t9 := abi.PktHeader(iovw[0][abi.SDMAReqInfoSize:])
	f := t9.PBC().Decode(abi.ChipWFR)
	f.Bypass = true
	t9.SetPBC(f.Encode(abi.ChipWFR))
	if _, err := uw.Writev(fdw, iovw); err != unix.EINVAL || *sent != 0 {
		t.Errorf("WFR bypass: %v, %d sent", err, *sent)
	}
}
