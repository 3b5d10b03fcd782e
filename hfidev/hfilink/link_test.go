package hfilink_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/hfilink"
	"github.com/softfabric/softfabric/hfidev/model"
)

var (
	gids4 = [2]netip.Addr{netip.MustParseAddr("::ffff:198.18.0.1"), netip.MustParseAddr("::ffff:198.18.0.2")}
	gids6 = [2]netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")}
)

func newLinks(tb testing.TB, cfg hfidevice.PairConfig) *hfidevice.ModelLinks {
	tb.Helper()
	if !cfg.GIDs[0].IsValid() {
		cfg.GIDs = gids4
	}
	m, err := hfidevice.NewModelLinks(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := m.Close(); err != nil {
			tb.Error(err)
		}
	})
	return m
}

func chips(t *testing.T, f func(t *testing.T, chip abi.Chip)) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		t.Run(chip.String(), func(t *testing.T) { f(t, chip) })
	}
}

// frame builds a RoCEv2 frame from src to dst GID as the engine does:
// the path's headers, a BTH for QPN qpn with opcode op, ext bytes of
// extension headers, n payload bytes and pad, the ICRC.
func frame(src, dst netip.Addr, srcLID, dstLID uint16, op wire.Opcode, qpn uint32, n int, seed byte) []byte {
	path, err := wire.NewPath(wire.PathFields{SrcMAC: hfilink.MAC(srcLID), DstMAC: hfilink.MAC(dstLID),
		Src: src.Unmap(), Dst: dst.Unmap(), SrcPort: wire.SourcePort(qpn, 77)})
	if err != nil {
		panic(err)
	}
	ext := op.Info().HeaderLen - wire.BTHSize
	pad := -n & 3
	hl := path.HeaderLen()
	f := make([]byte, hl+wire.BTHSize+ext+n+pad+wire.ICRCSize)
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: op, PadCount: uint8(pad), PKey: wire.DefaultPKey, DestQP: qpn,
		AckReq: true, PSN: 0xabcdef, Solicited: n%2 == 1, FECN: n%3 == 1})
	body := f[hl+wire.BTHSize : len(f)-wire.ICRCSize-pad]
	for i := range body {
		body[i] = seed + byte(i*13)
	}
	path.Finish(f)
	return f
}

// recvOne polls l until a frame arrives.
func recvOne(tb testing.TB, l *hfilink.Link) []byte {
	tb.Helper()
	buf := make([]byte, l.MaxFrame())
	sizes := []int{0}
	n, err := l.Recv([][]byte{buf}, sizes)
	if err != nil || n != 1 {
		tb.Fatalf("received %d frames, %v", n, err)
	}
	return buf[:sizes[0]]
}

// A frame the engine built crosses the model and comes out byte for byte
// as it went in — headers, BTH, extension headers, payload, pad and ICRC —
// by PIO and by SDMA, over IPv4 and IPv6 GIDs, on both chips; the packet
// on the wire is the 9B KDETH packet docs/hfidev.md describes, addressed
// to the context that serves the QPN.
func TestFrameRoundTrip(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, gids := range [][2]netip.Addr{gids4, gids6} {
			m := newLinks(t, hfidevice.PairConfig{Chip: chip, Contexts: 3, GIDs: gids})
			var last []byte
			m.Wire.SetDrop(func(_ *model.Unit, pkt []byte) bool { last = append(last[:0], pkt...); return false })
			ops := []wire.Opcode{wire.RCSendOnly, wire.RCWriteFirst, wire.RCReadResponseOnly,
				wire.RCAcknowledge, wire.RCCompareSwap, wire.UDSendOnlyImm, wire.RCSendLastImm}
			for i, n := range []int{0, 1, 3, 64, 1000, 1990, 2100, 4096} {
				op := ops[i%len(ops)]
				if op.Info().Mask&wire.MaskPayload == 0 {
					n = 0
				}
				qpn := uint32(0x100 + i)
				ctxt := m.Nodes[1].Ctxts[int(qpn)%3]
				f := frame(gids[0], gids[1], 1, 2, op, qpn, n, byte(i))
				sender := m.Links[0][i%3]
				if k, err := sender.Send([][]byte{f}); k != 1 || err != nil {
					t.Fatalf("send: %d, %v", k, err)
				}
				h := abi.Header9B(last)
				if h.DLID() != 2 || h.SLID() != 1 || h.LNH() != abi.LNHIBLocal || h.Opcode() != hfilink.TunnelOpcode ||
					h.QP() != abi.KDETHQPPrefix<<16|uint32(ctxt) || h.KVer() != abi.KDETHVersion || h.TIDCtrl() != 0 ||
					h.SWData(0) != hfilink.TunnelMark|uint32(op) || h.SWData(1) != qpn || int(h.PktLen())*4 != len(last)+abi.ICRCSize {
					t.Fatalf("%v %d B: 9B header %+v", op, n, h.Decode())
				}
				got := recvAt(t, m, ctxt)
				if !bytes.Equal(got, f) {
					t.Fatalf("%v %d B: frame differs\n got %x\nwant %x", op, n, got, f)
				}
			}
			s := m.LinkStats(0)
			if s.TxPIO == 0 || s.TxSDMA == 0 || s.TxPIO+s.TxSDMA != 8 {
				t.Errorf("stats %+v", s)
			}
		}
	})
}

// What the link cannot carry is dropped and counted, never sent: a frame
// to a GID not in the table, one from another GID than the port's, one
// that is not RoCEv2; on receive, a KDETH packet that is not a tunnelled
// frame and one from an unknown LID.
func TestDrops(t *testing.T) {
	m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR})
	a, b := m.Links[0][0], m.Links[1][0]
	other := netip.MustParseAddr("::ffff:198.18.0.9")
	bad := [][]byte{
		frame(gids4[0], other, 1, 2, wire.RCSendOnly, 5, 10, 0),    // no route
		frame(other, gids4[1], 1, 2, wire.RCSendOnly, 5, 10, 0),    // not our source
		frame(gids6[0], gids6[1], 1, 2, wire.RCSendOnly, 5, 10, 0), // another family
		make([]byte, 100), // not RoCEv2
	}
	if k, err := a.Send(bad); k != len(bad) || err != nil {
		t.Fatalf("send: %d, %v", k, err)
	}
	if s := a.Stats(); s.TxNoRoute != 3 || s.TxMalformed != 1 || s.TxPIO+s.TxSDMA != 0 || m.Wire.Stats().Carried != 0 {
		t.Fatalf("stats %+v, wire %+v", s, m.Wire.Stats())
	}
	if _, err := a.Send([][]byte{make([]byte, a.MaxFrame()+1)}); !errors.Is(err, link.ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}

	// Raw KDETH packets straight from A's context: another opcode, and
	// the tunnel's opcode from an unknown LID.
	ctxA := a.Context()
	for _, f := range []abi.Header9BFields{
		{SLID: 1, BTHKDETHFields: abi.BTHKDETHFields{Opcode: 0xc0}},
		{SLID: 9, BTHKDETHFields: abi.BTHKDETHFields{Opcode: hfilink.TunnelOpcode, SWData: [7]uint32{hfilink.TunnelMark}}},
	} {
		f.LNH, f.DLID, f.PktLen, f.KVer, f.JKey = abi.LNHIBLocal, 2, abi.Header9BSize/4+1, abi.KDETHVersion, ctxA.Base.JKey
		f.QP = abi.KDETHQPPrefix<<16 | uint32(m.Nodes[1].Ctxts[0])
		h := make([]byte, abi.Header9BSize)
		f.Encode(h)
		if err := ctxA.PIO().Send(0, h, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Recv([][]byte{make([]byte, b.MaxFrame())}, []int{0}); n != 0 || err != nil {
		t.Fatalf("received %d, %v", n, err)
	}
	if s := b.Stats(); s.RxForeign != 2 || s.RxFrames != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Frames that find no SDMA slot wait in the link, in order, and go when
// completions free slots; meanwhile the link lends fewer buffers. A full
// eager area loses the payload: the entry is counted as a receive error.
func TestBackpressure(t *testing.T) {
	m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipJKR, Link: hfilink.Config{SDMAMin: 64, TxBufs: 300},
		Model: func(c *model.Config) { c.SDMARingSize = 8 }})
	a, b := m.Links[0][0], m.Links[1][0]
	m.Units[0].HoldSDMACompletions(true)
	var fs [][]byte
	for i := range 20 {
		fs = append(fs, frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, 100+i, byte(i)))
	}
	room := a.TxRoom()
	if k, err := a.Send(fs); k != 20 || err != nil {
		t.Fatalf("send: %d, %v", k, err)
	}
	// 7 in flight (a ring of 8 keeps one slot free), 13 queued.
	if s := a.Stats(); s.TxSDMA != 7 || a.TxRoom() != room-20 {
		t.Fatalf("held: stats %+v, room %d of %d", s, a.TxRoom(), room)
	}
	m.Units[0].HoldSDMACompletions(false)
	for a.Stats().TxSDMA < 20 {
		m.Units[0].ReleaseSDMACompletions(8, false)
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	m.Units[0].ReleaseSDMACompletions(8, false)
	if err := a.Flush(); err != nil || a.TxRoom() != room {
		t.Fatalf("room %d of %d after every completion, %v", a.TxRoom(), room, err)
	}
	for i, f := range fs {
		if got := recvOne(t, b); !bytes.Equal(got, f) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

// PIO alone through a small send context that returns credits only when
// asked (no threshold): the link asks with PBC.CreditReturn as credits run
// low, and 200 packets of 18 blocks each through 40 credits wrap the
// 11-bit counters without a stall or a CREDIT_UPD.
func TestCreditsWrap(t *testing.T) {
	m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR, Link: hfilink.Config{SDMAMin: -1, MTU: 1500},
		Model: func(c *model.Config) { c.Credits, c.CreditThreshold = 40, 1000 }})
	a := m.Links[0][0]
	sendEach(t, a, m.Links[1][0], 200)
	if s := a.Stats(); s.TxPIO != 200 || s.TxErrors != 0 || s.CreditUpdates != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// sendEach sends n frames of 1000 bytes and more from a to b one at a
// time, each received byte-exact before the next goes.
func sendEach(t *testing.T, a, b *hfilink.Link, n int) {
	t.Helper()
	buf, sizes := [][]byte{make([]byte, b.MaxFrame())}, []int{0}
	for i := range n {
		f := frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, 1000+i, byte(i))
		if k, err := a.Send([][]byte{f}); k != 1 || err != nil {
			t.Fatalf("send %d: %d, %v", i, k, err)
		}
		if got, _ := b.Recv(buf, sizes); got != 1 || !bytes.Equal(buf[0][:sizes[0]], f) {
			t.Fatalf("frame %d lost or changed", i)
		}
	}
}

// recvAt receives one frame on B's link over hardware context ctxt.
func recvAt(t *testing.T, m *hfidevice.ModelLinks, ctxt uint16) []byte {
	t.Helper()
	for _, l := range m.Links[1] {
		if l.Context().Info.Ctxt == ctxt {
			return recvOne(t, l)
		}
	}
	t.Fatalf("no link over context %d", ctxt)
	return nil
}

var errSink error

// Sending and receiving a frame allocates nothing, by PIO and by SDMA.
func TestAllocs(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		frameAllocs(t, hfidevice.PairConfig{Chip: chip}, 64, 4096)
	})
}

// frameAllocs sends frames of each size from one link of cfg's pair to
// the other, checking each arrives whole and nothing allocates, and that
// both PIO and SDMA carried some.
func frameAllocs(t *testing.T, cfg hfidevice.PairConfig, sizes ...int) {
	m := newLinks(t, cfg)
	a, b := m.Links[0][0], m.Links[1][0]
	buf, got := [][]byte{make([]byte, b.MaxFrame())}, []int{0}
	for _, n := range sizes {
		f := [][]byte{frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, n, 1)}
		allocs := testing.AllocsPerRun(200, func() {
			_, errSink = a.Send(f)
			if k, _ := b.Recv(buf, got); k != 1 || !bytes.Equal(buf[0][:got[0]], f[0]) {
				t.Fatal("nothing received, or not the frame")
			}
		})
		if allocs != 0 {
			t.Errorf("%d B: %.1f allocations per frame", n, allocs)
		}
	}
	if s := a.Stats(); s.TxPIO == 0 || s.TxSDMA == 0 {
		t.Errorf("stats %+v", s)
	}
}

// New refuses a table or sizes the link cannot work with.
func TestConfig(t *testing.T) {
	u, err := model.NewUnit(model.DefaultConfig(abi.ChipWFR))
	if err != nil {
		t.Fatal(err)
	}
	c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	self := hfilink.Node{LID: 1, GID: gids4[0]}
	peer := hfilink.Node{LID: 2, GID: gids4[1], Ctxts: []uint16{3}}
	for _, cfg := range []hfilink.Config{
		{Peers: []hfilink.Node{peer}}, // no own GID
		{Self: self, Peers: []hfilink.Node{{LID: 2, GID: gids6[1], Ctxts: []uint16{3}}}}, // family
		{Self: self, Peers: []hfilink.Node{peer, peer}},                                  // LID twice
		{Self: self, Peers: []hfilink.Node{{LID: 2, GID: gids4[1]}}},                     // no context
		{Self: self, Peers: []hfilink.Node{peer}, MTU: 100},                              // tiny MTU
		{Self: self, Peers: []hfilink.Node{peer}, MTU: 40000},                            // beyond a PBC
		{Self: self, Peers: []hfilink.Node{peer}, SDMAMin: -1, MTU: 12000},               // PIO only, beyond the credits
		{Self: self, Peers: []hfilink.Node{peer}, ExpectedMin: 4096},                     // TID for buffers under 32 KiB
		{Self: self, Peers: []hfilink.Node{peer}, Header16B: true},                       // 16B on WFR: its user contexts are 9B only
	} {
		if _, err := hfilink.New(c, cfg); !errors.Is(err, hfilink.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// An idle worker's Sleep returns when a packet arrives, when woken, and
// at its timeout.
func TestSleep(t *testing.T) {
	m := newLinks(t, hfidevice.PairConfig{Chip: abi.ChipWFR})
	a, b := m.Links[0][0], m.Links[1][0]
	start := time.Now()
	if err := b.Sleep(5 * time.Millisecond); err != nil || time.Since(start) < 5*time.Millisecond {
		t.Fatalf("empty queue: back after %v, %v", time.Since(start), err)
	}
	b.Wake()
	start = time.Now()
	if err := b.Sleep(time.Minute); err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("woken: back after %v, %v", time.Since(start), err)
	}
	f := frame(gids4[0], gids4[1], 1, 2, wire.RCSendOnly, 5, 10, 1)
	go func() {
		time.Sleep(2 * time.Millisecond)
		_, _ = a.Send([][]byte{f})
	}()
	start = time.Now()
	if err := b.Sleep(time.Minute); err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("packet: back after %v, %v", time.Since(start), err)
	}
	if got := recvOne(t, b); !bytes.Equal(got, f) {
		t.Fatal("the packet Sleep saw differs")
	}
}

// A chip whose credit returns lag (the model holding them until forced):
// the link runs out of PIO credits, forces a return with CREDIT_UPD and
// goes on, every frame delivered in order.
func TestCreditUpdate(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		m := newLinks(t, hfidevice.PairConfig{Chip: chip, Link: hfilink.Config{SDMAMin: -1, MTU: 1500},
			Model: func(c *model.Config) { c.Credits, c.HoldCreditReturns = 40, true }})
		a := m.Links[0][0]
		sendEach(t, a, m.Links[1][0], 200)
		// 1000-byte frames take 17 blocks: two fit 40 credits, so about
		// every other frame forces a return.
		if s := a.Stats(); s.TxPIO != 200 || s.TxErrors != 0 || s.CreditUpdates < 50 {
			t.Fatalf("stats %+v", s)
		}
	})
}
