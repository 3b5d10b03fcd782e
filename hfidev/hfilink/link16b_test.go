package hfilink_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
	"github.com/softfabric/softfabric/hfidev/model"
)

// check16B checks the 16B packet pkt (PBC excluded, tail quadword
// included) carrying frame f (opcode op, QPN qpn) from LID 1 to context
// ctxt of LID 2, and returns its padding.
func check16B(t *testing.T, pkt []byte, op wire.Opcode, qpn uint32, ctxt uint16) int {
	t.Helper()
	h := abi.Header16B(pkt)
	if h.Check() != nil {
		t.Fatalf("%v: %d-byte packet", op, len(pkt))
	}
	tr := h.BTHKDETH()
	pad := int(tr.SWData(5))
	if h.L2() != abi.L2Type16B || h.L4() != abi.L4IBLocal || h.DLID() != 2 || h.SLID() != 1 || h.RC() != 0 ||
		h.LRHPKey() != tr.PKey() || int(h.PktLen())*abi.FlitSize != len(pkt) || len(pkt)%abi.FlitSize != 0 {
		t.Fatalf("%v: 16B LRH %+v of a %d-byte packet", op, h.Decode(), len(pkt))
	}
	if tr.Opcode() != hfilink.TunnelOpcode || tr.QP() != abi.KDETHQPPrefix<<16|uint32(ctxt) ||
		tr.KVer() != abi.KDETHVersion || tr.TIDCtrl() != 0 || tr.SWData(0) != hfilink.TunnelMark|uint32(op) ||
		tr.SWData(1) != qpn || (pad != 0 && pad != 4) {
		t.Fatalf("%v: BTH/KDETH %+v", op, tr.Decode())
	}
	return pad
}

// Frames cross two modeled JKR units as 16B packets and come out byte for
// byte, by PIO and by SDMA, over IPv4 and IPv6 GIDs, steered to the
// context that serves the QPN; payloads that are not whole quadwords go
// with 4 bytes of padding, which the receiver drops.
func TestFrameRoundTrip16B(t *testing.T) {
	for _, gids := range [][2]netip.Addr{gids4, gids6} {
		m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipJKR, Contexts: 3, GIDs: gids,
			Link: hfilink.Config{Header16B: true}})
		var last []byte
		m.Wire.SetDrop(func(_ *model.Unit, pkt []byte) bool { last = append(last[:0], pkt...); return false })
		ops := []wire.Opcode{wire.RCSendOnly, wire.RCWriteFirst, wire.RCReadResponseOnly,
			wire.RCAcknowledge, wire.RCCompareSwap, wire.UDSendOnlyImm, wire.RCSendLastImm}
		pads := 0
		for i, n := range []int{0, 1, 3, 4, 8, 64, 1000, 1990, 2100, 4092, 4096} {
			op := ops[i%len(ops)]
			if op.Info().Mask&wire.MaskPayload == 0 {
				n = 0
			}
			qpn := uint32(0x100 + i)
			ctxt := m.Nodes[1].Ctxts[int(qpn)%3]
			f := frame(gids[0], gids[1], 1, 2, op, qpn, n, byte(i))
			if k, err := m.Links[0][i%3].Send([][]byte{f}); k != 1 || err != nil {
				t.Fatalf("send: %d, %v", k, err)
			}
			pad := check16B(t, last, op, qpn, ctxt)
			if data := len(last) - abi.Header16BSize - abi.Tail16BSize; data%abi.FlitSize != 0 {
				t.Fatalf("%v %d B: 16B payload of %d bytes", op, n, data)
			}
			if pad > 0 {
				pads++
			}
			got := recvAt(t, m, ctxt)
			if !bytes.Equal(got, f) {
				t.Fatalf("%v %d B: frame differs\n got %x\nwant %x", op, n, got, f)
			}
		}
		s := m.LinkStats(0)
		if s.TxPIO == 0 || s.TxSDMA == 0 || s.TxPIO+s.TxSDMA != 11 || pads == 0 {
			t.Errorf("stats %+v, %d padded", s, pads)
		}
		if st, _ := m.Units[1].RcvStats(m.Nodes[1].Ctxts[0]); st.Packets16B != st.Packets || st.Packets == 0 {
			t.Errorf("receive stats %+v: not all 16B", st)
		}
	}
}

// mixedLinks joins two JKR units, one context each, and makes a link over
// each: A's sends 16B, B's 9B.
func mixedLinks(t *testing.T) (a, b *hfilink.Link, w *model.Wire) {
	var units [2]*model.Unit
	var ctxs [2]*hfidev.Context
	var nodes [2]hfilink.Node
	for i := range units {
		cfg := model.DefaultConfig(abi.ChipJKR)
		cfg.Unit, cfg.LID = i, uint16(i+1)
		u, err := model.NewUnit(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
		if err != nil {
			t.Fatal(err)
		}
		units[i], ctxs[i] = u, c
		nodes[i] = hfilink.Node{LID: cfg.LID, GID: gids4[i], Ctxts: []uint16{c.Info.Ctxt}}
	}
	w = model.Connect(units[0], units[1])
	var links [2]*hfilink.Link
	for i := range links {
		l, err := hfilink.New(ctxs[i], hfilink.Config{Self: nodes[i], Peers: []hfilink.Node{nodes[1-i]}, Header16B: i == 0})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		links[i] = l
	}
	return links[0], links[1], w
}

// A link receives 9B and 16B whatever it sends: A sends 16B, B 9B, and
// each rebuilds the other's frames byte for byte; RC runs between them.
func TestMixedFormats(t *testing.T) {
	a, b, w := mixedLinks(t)
	var last []byte
	w.SetDrop(func(_ *model.Unit, pkt []byte) bool { last = append(last[:0], pkt...); return false })
	for i, n := range []int{0, 12, 100, 3000} {
		f := frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, n, byte(i))
		if k, err := a.Send([][]byte{f}); k != 1 || err != nil {
			t.Fatal(k, err)
		}
		check16B(t, last, wire.RCSendOnly, 5, b.Context().Info.Ctxt)
		if got := recvOne(t, b); !bytes.Equal(got, f) {
			t.Fatalf("A→B (16B) %d B: frame differs", n)
		}
		g := frame(gids4[1], gids4[0], 2, 1, wire.RCSendOnly, 6, n, byte(i))
		if k, err := b.Send([][]byte{g}); k != 1 || err != nil {
			t.Fatal(k, err)
		}
		if h := abi.Header9B(last); h.LNH() != abi.LNHIBLocal || int(h.PktLen())*4 != len(last)+abi.ICRCSize {
			t.Fatalf("B→A: not a 9B packet: %+v", h.Decode())
		}
		if got := recvOne(t, a); !bytes.Equal(got, g) {
			t.Fatalf("B→A (9B) %d B: frame differs", n)
		}
	}
	w.SetDrop(nil)
	p := transporttest.NewLinkPair(a, b)
	for _, op := range []verbs.Opcode{verbs.OpSend, verbs.OpWrite, verbs.OpRead} {
		st := transporttest.NewStream(t, p, transporttest.RCOptions{}, op, 10000, 4096, 16)
		st.Run(t, 50)
	}
}

// Sending and receiving a 16B frame allocates nothing, by PIO and SDMA.
func TestAllocs16B(t *testing.T) {
	frameAllocs(t, hfidevice.PairConfig{Chip: abi.ChipJKR, Link: hfilink.Config{Header16B: true}}, 64, 100, 4096)
}

// Expected receive with 16B packets: a large READ's and WRITE's payload is
// placed by TID as 16B EXPECTED packets (whole quadwords at quadword
// offsets; a buffer 100 bytes past a page leaves most to eager receive),
// byte-exact, every entry freed.
func TestExpected16B(t *testing.T) {
	for _, op := range []verbs.Opcode{verbs.OpRead, verbs.OpWrite} {
		for _, off := range []int{0, 100} {
			t.Run(fmt.Sprintf("%s@%d", op, off), func(t *testing.T) {
				expectedWith(t, hfidevice.PairConfig{Chip: abi.ChipJKR, Link: hfilink.Config{Header16B: true}},
					op, 1<<20, off, 0)
			})
		}
	}
}
