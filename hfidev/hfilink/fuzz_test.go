package hfilink

import (
	"hash/crc32"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// fuzzLink is a link over a modeled context whose packets go nowhere.
func fuzzLink(tb testing.TB) *Link { return fuzzLinkWith(tb, false) }

// fuzzLinkWith is fuzzLink sending 16B packets (Config.Header16B) or 9B.
func fuzzLinkWith(tb testing.TB, h16 bool) *Link {
	u, err := model.NewUnit(model.DefaultConfig(abi.ChipJKR))
	if err != nil {
		tb.Fatal(err)
	}
	c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := New(c, Config{Self: Node{LID: 1, GID: netip.MustParseAddr("::ffff:10.0.0.1")},
		Peers: []Node{{LID: 2, GID: netip.MustParseAddr("::ffff:10.0.0.2"), Ctxts: []uint16{3, 4}}}, Header16B: h16})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}

// Whatever a receive entry holds, rebuild never panics, never writes
// past the buffer, and a frame it returns carries the opcode and QPN the
// KDETH software dwords named.
func FuzzRebuild(f *testing.F) {
	l := fuzzLink(f)
	h := make([]byte, abi.Header9BSize)
	(&abi.Header9BFields{SLID: 2, BTHKDETHFields: abi.BTHKDETHFields{Opcode: TunnelOpcode, SWData: [7]uint32{TunnelMark | 4, 0x1234}}}).Encode(h)
	f.Add(h, []byte("payload!"), 100, false)
	f.Add(h[:40], []byte{}, 0, false)
	g := make([]byte, abi.Header9BSize)
	(&abi.Header9BFields{SLID: 2, BTHKDETHFields: abi.BTHKDETHFields{Opcode: TunnelOpcode, SWData: [7]uint32{GrantMark, 0x1234, 7, 3, 4096, 2}}}).Encode(g)
	f.Add(g, []byte{1, 0, 0x10, 0, 1, 0, 0x20, 0}, 100, false)
	f.Add(h, []byte{}, 8000, true)
	f.Fuzz(func(t *testing.T, hdr, payload []byte, room int, expected bool) {
		if len(hdr) < abi.Header9BSize {
			return
		}
		buf := make([]byte, max(0, room%(l.maxFrame+1)))
		p := &hfidev.Packet{Header: abi.Header9B(hdr), Payload: payload}
		if expected {
			p.Fields.RcvType, p.Payload = abi.RcvTypeExpected, nil
		}
		rebuildChecked(t, l, p, buf, p.Header.BTHKDETH())
	})
}

// rebuildChecked rebuilds p into buf and fails t if the frame runs past
// buf or, parsed, does not carry the opcode and QPN that the software
// dwords of tr (p's BTH and KDETH) name; it returns the frame's length.
func rebuildChecked(t *testing.T, l *Link, p *hfidev.Packet, buf []byte, tr abi.BTHKDETH) int {
	t.Helper()
	n, _ := l.rebuild(p, buf)
	if n < 0 || n > len(buf) {
		t.Fatalf("%d bytes into %d", n, len(buf))
	}
	if n == 0 {
		return 0
	}
	var pkt wire.Packet
	if pkt.Parse(buf[:n]) == nil && (uint32(pkt.Opcode) != tr.SWData(0)&0xff || pkt.BTH().DestQP() != tr.SWData(1)&0xffffff) {
		t.Fatalf("opcode %v QPN %d from software dwords %#x %#x", pkt.Opcode, pkt.BTH().DestQP(), tr.SWData(0), tr.SWData(1))
	}
	return n
}

// FuzzRebuild16B is FuzzRebuild for 16B entries (a 16B header, the
// padding in software dword 5): no panic, no write past the buffer, the
// opcode and QPN as carried, and a frame never longer than the payload
// less its padding allows.
func FuzzRebuild16B(f *testing.F) {
	l := fuzzLink(f)
	h := make([]byte, abi.Header16BSize)
	hf := abi.Header16BFields{SLID: 2, L2: abi.L2Type16B, L4: abi.L4IBLocal}
	hf.BTHKDETH = abi.BTHKDETHFields{Opcode: TunnelOpcode, SWData: [7]uint32{TunnelMark | 4, 0x1234, 0, 0, 0, 4}}
	hf.Encode(h)
	f.Add(h, []byte("payload!"), 100, false)
	f.Add(h[:40], []byte{}, 0, false)
	f.Add(h, []byte{1, 2, 3}, 8000, false)
	f.Add(h, []byte{}, 8000, true)
	f.Fuzz(func(t *testing.T, hdr, payload []byte, room int, expected bool) {
		if len(hdr) < abi.Header16BSize {
			return
		}
		buf := make([]byte, max(0, room%(l.maxFrame+1)))
		p := &hfidev.Packet{L2Type: abi.L2Type16B, Header16B: abi.Header16B(hdr), Payload: payload}
		if expected {
			p.Fields.RcvType, p.Payload = abi.RcvTypeExpected, nil
		}
		tr := p.Header16B.BTHKDETH()
		n := rebuildChecked(t, l, p, buf, tr)
		if n == 0 {
			return
		}
		if !expected && n > wire.EthernetSize+wire.IPv6Size+wire.UDPSize+wire.BTHSize+len(payload)-int(tr.SWData(5))+wire.ICRCSize {
			t.Fatalf("a %d-byte frame from %d payload bytes, %d of padding", n, len(payload), tr.SWData(5))
		}
	})
}

// Whatever frame the engine hands over, transmit never panics and counts
// it exactly once.
func FuzzTransmit(f *testing.F) { fuzzTransmit(f, false) }

// FuzzTransmit16B is FuzzTransmit on a link sending 16B packets, whose
// payloads it pads to quadwords.
func FuzzTransmit16B(f *testing.F) { fuzzTransmit(f, true) }

func fuzzTransmit(f *testing.F, h16 bool) {
	l := fuzzLinkWith(f, h16)
	path, err := wire.NewPath(wire.PathFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")})
	if err != nil {
		f.Fatal(err)
	}
	fr := make([]byte, path.HeaderLen()+wire.BTHSize+8+wire.ICRCSize)
	wire.BTH(fr[path.HeaderLen():]).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, DestQP: 7})
	path.Finish(fr)
	f.Add(fr)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		total := func() uint64 {
			s := l.Stats()
			return s.TxPIO + s.TxSDMA + s.TxNoRoute + s.TxMalformed + s.TxErrors
		}
		before := total()
		if _, err := l.Send([][]byte{frame}); err != nil {
			return // longer than MaxFrame
		}
		if got := total() - before; got != 1 && len(frame) > 0 {
			t.Fatalf("frame counted %d times", got)
		}
	})
}

// Whatever an expected entry's header holds, rebuildPlaced never panics
// and never writes past the buffer, and a payload it reports placed lies
// in the memory an expectation named, at the place the PSN says, as long
// as the frame says.
func FuzzRebuildPlaced(f *testing.F) {
	l := fuzzLink(f)
	mem := make([]byte, 300<<10)
	skip := int(-uintptr(unsafe.Pointer(&mem[0])) & (abi.PageSize - 1))
	buf := mem[skip : skip+256<<10]
	const qpn, first = 0x1234, 100
	l.Expect(&link.Expectation{Peer: netip.MustParseAddr("::ffff:10.0.0.2").As16(), PeerQPN: 7, QPN: qpn, PSN: first,
		Packets: 64, MTU: 4096, Buf: buf})
	if l.exp.nsinks != 1 {
		f.Fatalf("%d sinks; stats %+v", l.exp.nsinks, l.Stats())
	}
	s := l.exp.sinks[0]
	h := make([]byte, abi.Header9BSize)
	hf := abi.Header9BFields{SLID: 2, PktLen: (abi.Header9BSize + 4096 + 4) / 4, BTHKDETHFields: abi.BTHKDETHFields{Opcode: TunnelOpcode, PSN: first + 3,
		SWData: [7]uint32{TunnelMark | uint32(wire.RCReadResponseMiddle), qpn}}}
	hf.Encode(h)
	abi.Header9B(h).SetKDETHTID(s.mp.m.Entries[0], 3*4096)
	// The seed carries the right ICRC, so that it is placed.
	out := make([]byte, l.maxFrame)
	p := &hfidev.Packet{Header: abi.Header9B(h)}
	p.Fields.RcvType = abi.RcvTypeExpected
	l.rebuild(p, out)
	end := wire.EthernetSize + wire.IPv4MinSize + wire.UDPSize + wire.BTHSize
	hf.SWData[3] = crc32.Update(wire.ComputeICRC(out[wire.EthernetSize:end]), crc32.IEEETable, buf[3*4096:4*4096])
	hf.Encode(h)
	abi.Header9B(h).SetKDETHTID(s.mp.m.Entries[0], 3*4096)
	if _, placed := l.rebuild(p, out); placed == nil {
		f.Fatalf("seed not placed: %+v", l.Stats())
	}
	f.Add(h, 8000)
	f.Fuzz(func(t *testing.T, hdr []byte, room int) {
		if len(hdr) < abi.Header9BSize {
			return
		}
		out := make([]byte, max(0, room%(l.maxFrame+1)))
		p := &hfidev.Packet{Header: abi.Header9B(hdr)}
		p.Fields.RcvType = abi.RcvTypeExpected
		n, placed := l.rebuild(p, out)
		if n < 0 || n > len(out) {
			t.Fatalf("%d bytes into %d", n, len(out))
		}
		if placed == nil {
			return
		}
		var pkt wire.Packet
		if err := pkt.Parse(out[:n]); err != nil || len(pkt.Payload) != len(placed) {
			t.Fatalf("frame %v, payload %d bytes, placed %d", err, len(pkt.Payload), len(placed))
		}
		k := int(psn.PSN(p.Header.PSN() & psn.Mask).Diff(first))
		if k < 0 || &placed[0] != &buf[k*4096] {
			t.Fatalf("PSN %d placed elsewhere", p.Header.PSN())
		}
	})
}
