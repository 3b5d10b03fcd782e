package hfidev

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// kdethHeader16B writes a 16B KDETH header for a packet of n payload bytes
// (a multiple of 8) to context to: SWData[0] carries seq, SWData[1] the
// length, as kdethHeader's.
func kdethHeader16B(h []byte, from, to *Context, seq uint32, n int) {
	f := abi.Header16BFields{SLID: uint32(lid(from)), DLID: uint32(lid(to)), PktLen: abi.PktLen16B(n),
		L2: abi.L2Type16B, L4: abi.L4IBLocal, LRHPKey: 0xffff, Entropy: uint16(seq)}
	f.BTHKDETH = abi.BTHKDETHFields{Opcode: 0xc0, PKey: 0xffff, QP: abi.KDETHQPPrefix<<16 | uint32(to.Info.Ctxt),
		PSN: seq, KVer: abi.KDETHVersion, JKey: to.Base.JKey}
	f.BTHKDETH.SWData[0], f.BTHKDETH.SWData[1] = seq, uint32(n)
	f.Encode(h)
}

// pbc16B is a JKR PBC for a 16B packet to context to, as OPX builds it:
// L2Type 16B, InsertICRC, the DLID.
func pbc16B(to *Context) abi.PBC {
	return (&abi.PBCFields{L2Type: abi.L2Type16B, InsertICRC: true, DLID: uint32(lid(to))}).Encode(abi.ChipJKR)
}

// JKR, PIO: 16B packets, each followed by a 9B one in the same queue,
// arrive as Packet.L2Type 16B with the header at the start of the entry
// (RHF.HdrqOffset 0) and no 9B view, RHF.PktLen in dwords counting the
// tail quadword, the payload byte-exact without the tail; the 9B packets
// arrive as before.
func TestRecv16B(t *testing.T) {
	l := newLink(t, abi.ChipJKR, nil)
	r := l.b.Receiver()
	hdr := make([]byte, abi.Header16BSize)
	for i, n := range []int{0, 8, 48, 56, 64, 1000, 4096, 8184} {
		seq := uint32(i)
		kdethHeader16B(hdr, l.a, l.b, seq, n)
		payload := pattern(n, byte(seq))
		sendPIO(t, l.a, pbc16B(l.b), hdr, payload)
		h9, p9 := l.send(t, l.a, l.b, 100+seq, n)

		p, ok := r.Poll()
		if !ok {
			t.Fatalf("%d bytes: nothing received", n)
		}
		f := p.Fields
		if p.Err != nil || p.L2Type != abi.L2Type16B || p.Header != nil || !bytes.Equal(p.Header16B, hdr) ||
			!bytes.Equal(p.Payload, payload) {
			t.Fatalf("%d bytes: err %v, L2Type %d, 9B header %v, 16B header equal %v, payload %d bytes",
				n, p.Err, p.L2Type, p.Header != nil, bytes.Equal(p.Header16B, hdr), len(p.Payload))
		}
		if f.L2Type != abi.L2Type16B || f.HdrqOffset != abi.HdrqOffset16B || int(f.PktLen) != (64+n+8)/4 ||
			f.UseEgrBfr != (n > 0) || f.RcvType != abi.RcvTypeEager || f.RHEValid ||
			int(p.Header16B.PktLen())*2 != int(f.PktLen) {
			t.Errorf("%d bytes: RHF %+v", n, f)
		}
		if &p.Header16B[0] != &r.mem[((2*i)%r.cnt)*r.entBytes] {
			t.Errorf("%d bytes: the 16B header is not at the start of its entry", n)
		}
		if p.BTHKDETH().SWData(0) != seq || p.BTHKDETH().SWData(1) != uint32(n) || p.SLID() != uint32(lid(l.a)) {
			t.Errorf("%d bytes: SWData %d/%d, SLID %d", n, p.BTHKDETH().SWData(0), p.BTHKDETH().SWData(1), p.SLID())
		}
		r.Release()

		p, ok = r.Poll()
		if !ok || p.Err != nil || p.L2Type != abi.L2Type9B || p.Header16B != nil || !bytes.Equal(p.Header, h9) ||
			!bytes.Equal(p.Payload, p9) || p.Fields.HdrqOffset != abi.HdrqOffset9B || p.BTHKDETH().SWData(0) != 100+seq ||
			p.SLID() != uint32(lid(l.a)) {
			t.Fatalf("9B after %d bytes: %v %+v", n, ok, p)
		}
		r.Release()
	}
	if s := rcvStats(t, l.ub, l.b); s.Packets != 16 || s.Packets16B != 8 || s.LenErr+s.EgrFull+s.HdrqFull != 0 {
		t.Errorf("stats %+v", s)
	}
	// A 16B packet must be whole quadwords.
	kdethHeader16B(hdr, l.a, l.b, 0, 4)
	if err := l.a.PIO().Send(pbc16B(l.b), hdr, pattern(4, 0)); !errors.Is(err, ErrPacketLength) {
		t.Errorf("a 68-byte 16B packet: %v", err)
	}
}

// JKR, SDMA: a 16B EAGER request is cut into 16B packets whose headers
// the driver rewrites as for 9B (PSN, BTH.A, SWData[6], the lengths in
// flits), each received as 16B; data not in whole quadwords is refused
// before the driver.
func TestSDMA16B(t *testing.T) {
	l := newLink(t, abi.ChipJKR, nil)
	s, r := l.a.SDMA(), l.b.Receiver()
	const frag = 4096
	hdr := make([]byte, abi.Header16BSize)
	for i, size := range []int{0, 8, 4096, 4104, 10000, 65536 + 8} {
		kdethHeader16B(hdr, l.a, l.b, 1000, 0)
		abi.Header16B(hdr).BTHKDETH().SetSWData(6, 0x100)
		msg := pattern(size, byte(i))
		slot, err := s.Submit(pbc16B(l.b), hdr, frag, split(msg, 1+i%8))
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		npkts := max(1, (size+frag-1)/frag)
		var got []byte
		for k := range npkts {
			p, ok := r.Poll()
			if !ok || p.Err != nil || p.L2Type != abi.L2Type16B {
				t.Fatalf("%d bytes: packet %d: %v %+v", size, k, ok, p)
			}
			h := p.Header16B.BTHKDETH()
			n := min(frag, size-k*frag)
			if size == 0 {
				n = 0
			}
			if h.PSN() != uint32(1000+k) || h.AckReq() != (k > 0 && k == npkts-1) || h.SWData(6) != uint32(0x100+k*frag) ||
				p.Header16B.PktLen() != abi.PktLen16B(n) || len(p.Payload) != n {
				t.Errorf("%d bytes, packet %d: PSN %d A %v off %#x len %d, %d bytes", size, k, h.PSN(), h.AckReq(),
					h.SWData(6), p.Header16B.PktLen(), len(p.Payload))
			}
			got = append(got, p.Payload...)
			r.Release()
		}
		if !bytes.Equal(got, msg) {
			t.Errorf("%d bytes: message differs", size)
		}
		if c, ok := s.Reap(); !ok || c.Slot != slot || c.Status != abi.SDMAComplete {
			t.Errorf("%d bytes: completion %+v %v", size, c, ok)
		}
	}
	if _, err := s.Submit(pbc16B(l.b), hdr, frag, [][]byte{pattern(4100, 0)}); !errors.Is(err, ErrSDMARequest) {
		t.Errorf("4100 bytes of 16B: %v", err)
	}
	if _, err := s.Submit(pbc16B(l.b), hdr[:abi.Header9BSize], frag, nil); !errors.Is(err, ErrSDMARequest) {
		t.Errorf("a 56-byte 16B header: %v", err)
	}
}

// JKR: a 16B EXPECTED request lands in the receiver's TID buffer, each
// packet a header-only 16B entry naming where its payload went.
func TestTIDTransfer16B(t *testing.T) {
	l := newLink(t, abi.ChipJKR, nil)
	const size, off = 256 << 10, 4096 + 64
	buf := tidBuf(t, off+size+abi.PageSize)
	m, err := l.b.TIDUpdate(buf)
	if err != nil {
		t.Fatal(err)
	}
	tids, toff, _ := m.From(off)
	msg := pattern(size, 9)
	hdr := make([]byte, abi.Header16BSize)
	kdethHeader16B(hdr, l.a, l.b, 0x1237f0, 0)
	if _, err := l.a.SDMA().SubmitExpected(pbc16B(l.b), hdr, 4096, split(msg, 2), tids, toff); err != nil {
		t.Fatal(err)
	}
	npkts, _, _, _ := expectedPackets(tids, toff, 4096, size)
	r := l.b.Receiver()
	for k := range npkts {
		p, ok := r.Poll()
		if !ok || p.Err != nil || p.L2Type != abi.L2Type16B || p.Fields.RcvType != abi.RcvTypeExpected || p.Payload != nil {
			t.Fatalf("packet %d: %v %+v", k, ok, p)
		}
		h := p.BTHKDETH()
		if at := tidStart(t, m, h.TID(), h.TIDCtrl()) + h.TIDOffset(); at != off+int(h.SWData(6)) {
			t.Fatalf("packet %d names byte %d, its data is byte %d", k, at, off+int(h.SWData(6)))
		}
		r.Release()
	}
	if !bytes.Equal(buf[off:off+size], msg) || !untouched(buf[:off]) || !untouched(buf[off+size:]) {
		t.Error("the buffer differs from the message")
	}
	if st := rcvStats(t, l.ub, l.b); st.Expected != uint64(npkts) || st.Packets16B != uint64(npkts) {
		t.Errorf("stats %+v", st)
	}
	// An offset that leaves the first packet off a quadword is refused.
	if _, err := l.a.SDMA().SubmitExpected(pbc16B(l.b), hdr, 4096, split(msg, 2), tids, toff+4); !errors.Is(err, ErrSDMARequest) {
		t.Errorf("offset %d: %v", toff+4, err)
	}
}

// WFR takes no 16B: hfidev refuses a bypass PBC on PIO and SDMA (a WFR
// user send context may not send bypass packets), and a WFR unit joined
// to a JKR one drops the 16B packets the JKR unit sends (WFR would steer
// them to its bypass context, the kernel's) while 9B ones cross.
func TestWFRRefuses16B(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	bypass := (&abi.PBCFields{Bypass: true, InsertICRC: true}).Encode(abi.ChipWFR)
	hdr := make([]byte, abi.Header16BSize)
	kdethHeader16B(hdr, l.a, l.b, 1, 64)
	if err := l.a.PIO().Send(bypass, hdr, pattern(64, 1)); !errors.Is(err, ErrBypass) {
		t.Errorf("PIO: %v", err)
	}
	if _, err := l.a.SDMA().Submit(bypass, hdr, 4096, [][]byte{pattern(64, 1)}); !errors.Is(err, ErrBypass) ||
		!errors.Is(err, ErrSDMARequest) {
		t.Errorf("SDMA: %v", err)
	}
	// The L2Type bits mean nothing on WFR: a PBC with them is a 9B packet.
	h9, p9 := make([]byte, abi.Header9BSize), pattern(64, 2)
	kdethHeader(h9, l.a, l.b, 2, 64)
	sendPIO(t, l.a, (&abi.PBCFields{L2Type: abi.L2Type16B}).Encode(abi.ChipJKR)&0x300000, h9, p9)
	if p, ok := l.b.Receiver().Poll(); !ok || p.Err != nil || p.L2Type != abi.L2Type9B || !bytes.Equal(p.Payload, p9) {
		t.Errorf("9B with L2Type bits on WFR: %v %+v", ok, p)
	}

	// JKR unit A, WFR unit B.
	var units [2]*model.Unit
	var ctxs [2]*Context
	for i, chip := range []abi.Chip{abi.ChipJKR, abi.ChipWFR} {
		cfg := model.DefaultConfig(chip)
		cfg.Unit, cfg.LID = i, uint16(i+1)
		u, err := model.NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := OpenContext(u, u.Path(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		units[i], ctxs[i] = u, c
	}
	w := model.Connect(units[0], units[1])
	a, b := ctxs[0], ctxs[1]
	kdethHeader16B(hdr, a, b, 3, 64)
	sendPIO(t, a, pbc16B(b), hdr, pattern(64, 3))
	kdethHeader(h9, a, b, 4, 64)
	sendPIO(t, a, pbc9B(abi.ChipJKR, b), h9, p9)
	if s := units[1].IngressStats(); s.Bypass != 1 || s.Delivered != 1 || w.Stats().Carried != 2 {
		t.Errorf("WFR ingress %+v, wire %+v", s, w.Stats())
	}
	r := b.Receiver()
	if p, ok := r.Poll(); !ok || p.L2Type != abi.L2Type9B || p.Header.SWData(0) != 4 {
		t.Fatalf("WFR: %v %+v", ok, p)
	}
	r.Release()
	if _, ok := r.Poll(); ok {
		t.Error("WFR received a second packet")
	}
}

// 16B packets cost no allocation to send by PIO and SDMA or to receive.
func TestAllocs16B(t *testing.T) {
	l := newLink(t, abi.ChipJKR, nil)
	r := l.b.Receiver()
	hdr := make([]byte, abi.Header16BSize)
	kdethHeader16B(hdr, l.a, l.b, 1, 256)
	payload := pattern(256, 1)
	data := [][]byte{pattern(6000, 1), pattern(3000, 2)}
	drain := func() {
		for {
			if _, ok := r.Poll(); !ok {
				return
			}
			r.Release()
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := l.a.PIO().Send(pbc16B(l.b), hdr, payload); err != nil {
			if err = l.a.CreditUpdate(); err != nil {
				t.Fatal(err)
			}
		}
		drain()
	}); n != 0 {
		t.Errorf("PIO 16B: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := l.a.SDMA().Submit(pbc16B(l.b), hdr, 4096, data); err != nil {
			t.Fatal(err)
		}
		l.a.SDMA().Reap()
		drain()
	}); n != 0 {
		t.Errorf("SDMA 16B: %v allocs", n)
	}
}
