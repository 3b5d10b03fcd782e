package device

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// fakeSocket records what reaches the NIC and lends one transmit buffer.
type fakeSocket struct {
	sent [][]byte
	buf  []byte
	room int
}

func (f *fakeSocket) Send(frames [][]byte) (int, error) {
	for _, fr := range frames {
		f.sent = append(f.sent, bytes.Clone(fr))
	}
	return len(frames), nil
}
func (f *fakeSocket) Recv([][]byte, []int) (int, error) { return 0, nil }
func (f *fakeSocket) MaxFrame() int                     { return 2048 }
func (f *fakeSocket) TxBuf() []byte                     { return f.buf }
func (f *fakeSocket) TxSubmit(n int) {
	if n > 0 {
		f.sent = append(f.sent, bytes.Clone(f.buf[:n]))
	}
}
func (f *fakeSocket) TxRoom() int                                       { return f.room }
func (f *fakeSocket) TxBufSize() int                                    { return len(f.buf) }
func (f *fakeSocket) Flush() error                                      { return nil }
func (f *fakeSocket) RecvZC([][]byte) int                               { return 0 }
func (f *fakeSocket) ReleaseRx()                                        {}
func (f *fakeSocket) Wait(time.Duration) error                          { return nil }
func (f *fakeSocket) FD() int                                           { return -1 }
func (f *fakeSocket) PrepareWait(t time.Duration) (bool, time.Duration) { return false, t }

// loopFrame is a RoCEv2 frame from src to dst (MACs and addresses), with
// tag in its payload.
func loopFrame(t testing.TB, srcMAC, dstMAC [6]byte, src, dst netip.Addr, tag byte) []byte {
	t.Helper()
	path, err := wire.NewPath(wire.PathFields{SrcMAC: srcMAC, DstMAC: dstMAC, Src: src, Dst: dst, SrcPort: 0xc000})
	if err != nil {
		t.Fatal(err)
	}
	hl := path.HeaderLen()
	f := make([]byte, hl+wire.BTHSize+16+wire.ICRCSize)
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 17})
	f[hl+wire.BTHSize] = tag
	path.Finish(f)
	return f
}

// TestLoopLink: frames to the device's own MAC and addresses (IPv4 and
// IPv6) come back on the receive side, in order, whether sent by Send or
// built in place; the rest reach the socket. A full ring holds the sender
// back; the hot path allocates nothing once the ring exists.
func TestLoopLink(t *testing.T) {
	me, peer := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	v4, v6 := netip.MustParseAddr("198.18.9.1"), netip.MustParseAddr("fe80::1")
	other := netip.MustParseAddr("198.18.9.2")
	s := &fakeSocket{buf: make([]byte, 2048), room: 1000}
	l := newLoopLink(s, me, []netip.Addr{netip.AddrFrom16(v4.As16()), v6})
	var _ link.TxFramer = l

	frames := [][]byte{
		loopFrame(t, me, me, v4, v4, 1),      // looped
		loopFrame(t, me, peer, v4, other, 2), // to the peer
		loopFrame(t, me, me, v6, v6, 3),      // looped
		loopFrame(t, me, me, v4, other, 4),   // our MAC, not our address: sent
		loopFrame(t, me, peer, v4, v4, 5),    // our address via another MAC: sent
		loopFrame(t, me, me, v4, v4, 6)[:20], // too short to be ours: sent
	}
	if n, err := l.Send(frames); n != len(frames) || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	b := l.TxBuf()
	n := copy(b, loopFrame(t, me, me, v4, v4, 7))
	l.TxSubmit(n)
	if len(s.sent) != 4 {
		t.Fatalf("%d frames reached the socket, want 4", len(s.sent))
	}
	if ready, _ := l.PrepareWait(time.Second); !ready {
		t.Fatal("looped frames waiting, PrepareWait says none")
	}
	views := make([][]byte, 8)
	if k := l.RecvZC(views); k != 3 || !bytes.Equal(views[0], frames[0]) || !bytes.Equal(views[1], frames[2]) || views[2][len(views[2])-wire.ICRCSize-16] != 7 {
		t.Fatalf("RecvZC gave %d frames back", k)
	}
	if k := l.RecvZC(views); k != 0 {
		t.Fatalf("RecvZC gave %d frames again", k)
	}
	if looped, dropped := l.looped.Load(), l.dropped.Load(); looped != 3 || dropped != 0 {
		t.Fatalf("looped %d dropped %d", looped, dropped)
	}

	// A full ring: TxRoom is 0, Send takes what fits, Recv drains it.
	mine := loopFrame(t, me, me, v4, v4, 8)
	many := make([][]byte, loopRing+10)
	for i := range many {
		many[i] = mine
	}
	if n, err := l.Send(many); n != loopRing || err != nil {
		t.Fatalf("Send into a ring of %d: %d, %v", loopRing, n, err)
	}
	if r := l.TxRoom(); r != 0 {
		t.Fatalf("TxRoom %d with a full ring", r)
	}
	bufs, sizes := make([][]byte, loopRing), make([]int, loopRing)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	if k, err := l.Recv(bufs, sizes); k != loopRing || err != nil || !bytes.Equal(bufs[loopRing-1][:sizes[loopRing-1]], mine) {
		t.Fatalf("Recv: %d, %v", k, err)
	}

	one := [][]byte{mine}
	if a := testing.AllocsPerRun(100, func() {
		_, _ = l.Send(one)
		l.RecvZC(views)
		l.ReleaseRx()
	}); a != 0 {
		t.Fatalf("%v allocations per looped frame", a)
	}
}
