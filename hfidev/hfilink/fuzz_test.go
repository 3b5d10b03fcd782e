package hfilink

import (
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// fuzzLink is a link over a modeled context whose packets go nowhere.
func fuzzLink(tb testing.TB) *Link {
	u, err := model.NewUnit(model.DefaultConfig(abi.ChipJKR))
	if err != nil {
		tb.Fatal(err)
	}
	c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := New(c, Config{Self: Node{LID: 1, GID: netip.MustParseAddr("::ffff:10.0.0.1")},
		Peers: []Node{{LID: 2, GID: netip.MustParseAddr("::ffff:10.0.0.2"), Ctxts: []uint16{3, 4}}}})
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
	(&abi.Header9BFields{Opcode: TunnelOpcode, SLID: 2, SWData: [7]uint32{TunnelMark | 4, 0x1234}}).Encode(h)
	f.Add(h, []byte("payload!"), 100)
	f.Add(h[:40], []byte{}, 0)
	f.Fuzz(func(t *testing.T, hdr, payload []byte, room int) {
		if len(hdr) < abi.Header9BSize {
			return
		}
		buf := make([]byte, max(0, room%(l.maxFrame+1)))
		p := &hfidev.Packet{Header: abi.Header9B(hdr), Payload: payload}
		n := l.rebuild(p, buf)
		if n < 0 || n > len(buf) {
			t.Fatalf("%d bytes into %d", n, len(buf))
		}
		if n == 0 {
			return
		}
		var pkt wire.Packet
		if pkt.Parse(buf[:n]) == nil && (uint32(pkt.Opcode) != p.Header.SWData(0)&0xff || pkt.BTH().DestQP() != p.Header.SWData(1)&0xffffff) {
			t.Fatalf("opcode %v QPN %d from software dwords %#x %#x", pkt.Opcode, pkt.BTH().DestQP(), p.Header.SWData(0), p.Header.SWData(1))
		}
	})
}

// Whatever frame the engine hands over, transmit never panics and counts
// it exactly once.
func FuzzTransmit(f *testing.F) {
	l := fuzzLink(f)
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
