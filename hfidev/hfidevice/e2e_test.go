package hfidevice_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
	"github.com/softfabric/softfabric/hfidev/model"
)

// side is one end of a connection over the model: a manual-progress
// domain on a device, one MSG endpoint, its CQ and a registered buffer.
type side struct {
	fab  *fabric.Fabric
	dom  *fabric.Domain
	cq   *fabric.CQ
	ep   *fabric.Endpoint
	mr   *fabric.MR
	av   *fabric.AV // DGRAM
	buf  []byte
	done []fabric.Completion
	// shared: the fabric and domain are another side's (endpoint).
	shared bool
}

const bufSize = 1 << 20

// openSide opens a side with an endpoint of type typ on worker w.
func openSide(t *testing.T, d *device.Device, gid netip.Addr, typ fabric.EPType, w int) *side {
	t.Helper()
	hints := &fabric.Hints{Provider: fabric.ProviderSoftfabric, EPType: typ, Node: gid.Unmap().String(),
		Domain: fabric.DomainAttr{Progress: fabric.ProgressManual, Threading: fabric.ThreadDomain},
		TX:     fabric.TxAttr{Size: 64}, RX: fabric.RxAttr{Size: 64}}
	infos, err := fabric.DeviceInfo(context.Background(), d, hints)
	if err != nil {
		t.Fatal(err)
	}
	return openInfo(t, infos[0], typ, w)
}

// openInfo opens a side on the device info names (GetInfo's or
// DeviceInfo's).
func openInfo(t *testing.T, info fabric.Info, typ fabric.EPType, w int) *side {
	t.Helper()
	s := &side{}
	var err error
	if s.fab, err = fabric.OpenFabric(&info); err != nil {
		t.Fatal(err)
	}
	if s.dom, err = s.fab.Domain(&info); err != nil {
		t.Fatal(err)
	}
	s.open(t, info, typ, w)
	return s
}

// endpoint opens another side on s's domain, with its own CQ, buffer and
// endpoint of type typ on worker w. Close it before s.
func (s *side) endpoint(t *testing.T, info fabric.Info, typ fabric.EPType, w int) *side {
	t.Helper()
	e := &side{fab: s.fab, dom: s.dom, shared: true}
	e.open(t, info, typ, w)
	return e
}

// open opens the side's CQ, buffer and endpoint on its domain.
func (s *side) open(t *testing.T, info fabric.Info, typ fabric.EPType, w int) {
	t.Helper()
	s.buf = make([]byte, bufSize)
	var err error
	if s.cq, err = s.dom.CQ(256); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.dom.RegisterMemory(s.buf, 0); err != nil {
		t.Fatal(err)
	}
	if s.ep, err = s.dom.Endpoint(&info); err != nil {
		t.Fatal(err)
	}
	if err := s.ep.SetOption(fabric.OptWorker, w); err != nil {
		t.Fatal(err)
	}
	if err := s.ep.Bind(s.cq, 0); err != nil {
		t.Fatal(err)
	}
	if typ == fabric.EPDgram {
		if s.av, err = s.dom.AV(4); err != nil {
			t.Fatal(err)
		}
		if err := s.ep.Bind(s.av, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ep.Enable(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
}

// close closes the side's objects (once): its domain, unless shared,
// stops driving the device, whose engine counters may then be read.
func (s *side) close() {
	if s.fab == nil {
		return
	}
	_ = s.ep.Close()
	if s.av != nil {
		_ = s.av.Close()
	}
	_ = s.mr.Close()
	_ = s.cq.Close()
	if !s.shared {
		_ = s.dom.Close()
		_ = s.fab.Close()
	}
	s.fab = nil
}

// modelPair opens a pair of modeled units with contexts contexts each
// and a connected MSG endpoint on each, a's on worker wa, b's on worker
// wb. drop, if not zero, loses every drop-th packet on the wire.
func modelPair(t *testing.T, chip abi.Chip, drop uint64, contexts, wa, wb int) (*hfidevice.Pair, *side, *side) {
	t.Helper()
	p := newPair(t, chip, drop, contexts)
	a, b := openSide(t, p.Devs[0], hfidevice.DefaultGIDs[0], fabric.EPMsg, wa), openSide(t, p.Devs[1], hfidevice.DefaultGIDs[1], fabric.EPMsg, wb)
	connect(t, a, b)
	return p, a, b
}

// connect connects a's and b's MSG endpoints to each other.
func connect(t *testing.T, a, b *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range [][2]*side{{a, b}, {b, a}} {
		if err := c[0].ep.ConnectQP(ctx, c[1].ep.QPInfo(), fabric.QPOptions{Timeout: 12}); err != nil {
			t.Fatal(err)
		}
	}
}

func newPair(t *testing.T, chip abi.Chip, drop uint64, contexts int) *hfidevice.Pair {
	t.Helper()
	p, err := hfidevice.NewModelPair(hfidevice.PairConfig{Chip: chip, Contexts: contexts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	if drop > 0 {
		var n atomic.Uint64
		p.Wire.SetDrop(func(*model.Unit, []byte) bool { return n.Add(1)%drop == 0 })
	}
	return p
}

// wait drives both domains until each side has had want[i] completions,
// failing on an error completion or after a deadline.
func wait(t *testing.T, a, b *side, wantA, wantB int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var cs [16]fabric.Completion
	for len(a.done) < wantA || len(b.done) < wantB {
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d/%d and %d/%d completions", len(a.done), wantA, len(b.done), wantB)
		}
		for _, s := range []*side{a, b} {
			s.dom.Progress()
			n := s.cq.Read(cs[:])
			for _, c := range cs[:n] {
				if err := c.Err(); err != nil {
					t.Fatalf("completion %+v: %v", c, err)
				}
			}
			s.done = append(s.done, cs[:n]...)
		}
	}
	a.done, b.done = a.done[:0], b.done[:0]
}

func fill(b []byte, seed int) []byte {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8 + 1)
	}
	return b
}

// sizes cross the PIO/SDMA threshold and the path MTU: one packet by PIO,
// one by SDMA, multi-packet messages of both.
var sizes = []int{1, 60, 1000, 2100, 4096, 4097, 65536, 300001}

// The transport over the model, end to end: send/recv, RDMA write and
// read, fetch-and-add and compare-and-swap, data checked byte for byte, on
// both chips, on a perfect wire and on one losing every 29th packet.
func TestFabricOverModel(t *testing.T) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		for _, drop := range []uint64{0, 29} {
			name := chip.String()
			if drop > 0 {
				name += "/loss"
			}
			t.Run(name, func(t *testing.T) { fabricOps(t, chip, drop) })
		}
	}
}

func fabricOps(t *testing.T, chip abi.Chip, drop uint64) {
	p, a, b := modelPair(t, chip, drop, 1, 0, 0)
	rmaOps(t, a, b, sizes)
	atomicOps(t, a, b)
	a.close()
	b.close()
	for i := range 2 {
		s := p.LinkStats(i)
		if s.TxPIO == 0 || s.TxSDMA == 0 || s.TxErrors != 0 || s.TxNoRoute != 0 || s.TxMalformed != 0 || s.RxForeign != 0 || s.TxSDMAErrors != 0 {
			t.Errorf("unit %d: %+v", i, s)
		}
		if e := p.Devs[i].Stats(); e.BadICRC != 0 || e.Malformed != 0 {
			t.Errorf("unit %d engine: %+v", i, e)
		}
	}
	if w := p.Wire.Stats(); (drop > 0) != (w.Dropped > 0) {
		t.Errorf("wire: %+v", w)
	}
	t.Logf("wire %+v; A %+v; B %+v", p.Wire.Stats(), p.LinkStats(0), p.LinkStats(1))
}

// Two contexts a unit, a device worker on each: the endpoints on
// different workers at the two ends, so that frames reach a context
// whose worker may not own their queue pair (the engine group hands them
// over).
func TestFabricTwoContexts(t *testing.T) {
	p, a, b := modelPair(t, abi.ChipJKR, 0, 2, 1, 0)
	if q := a.dom.Queues(); q != 2 {
		t.Fatalf("%d workers, want 2", q)
	}
	rmaOps(t, a, b, []int{1, 4096, 65536})
	atomicOps(t, a, b)
	qa, qb := a.ep.QPInfo().QPN, b.ep.QPInfo().QPN
	a.close()
	b.close()
	// Each QPN maps to the worker owning it (Options.QPNWorker): every
	// frame arrives at that worker's context, none is handed over.
	for i, w := range []int{1, 0} {
		ws := p.Devs[i].WorkerStats()
		if ws[w].RxFrames == 0 || ws[1-w].RxFrames != 0 || ws[w].HandedIn+ws[w].HandedOff+ws[1-w].HandedOff != 0 {
			t.Errorf("unit %d workers %+v", i, ws)
		}
		for c, l := range p.Links[i] {
			if s := l.Stats(); s.TxErrors+s.RxErrors+s.RxForeign != 0 {
				t.Errorf("unit %d context %d: %+v", i, c, s)
			}
		}
	}
	if qa%2 != 1 || qb%2 != 0 {
		t.Errorf("QPNs %d (worker 1), %d (worker 0)", qa, qb)
	}
}

// UD over the model: datagrams of up to the path MTU, by PIO and SDMA,
// byte-exact.
func TestDatagramsOverModel(t *testing.T) {
	p := newPair(t, abi.ChipWFR, 0, 1)
	a := openSide(t, p.Devs[0], hfidevice.DefaultGIDs[0], fabric.EPDgram, 0)
	b := openSide(t, p.Devs[1], hfidevice.DefaultGIDs[1], fabric.EPDgram, 0)
	to, err := a.av.Insert(b.ep.Name())
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{1, 100, 2000, 4096} {
		dst := b.buf[:n]
		clear(dst)
		if err := b.ep.Recv(dst, b.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
			t.Fatal(err)
		}
		want := fill(a.buf[:n], i)
		if err := a.ep.Send(want, a.mr.Desc(), to, 2); err != nil {
			t.Fatal(err)
		}
		wait(t, a, b, 1, 1)
		if !bytes.Equal(dst, want) {
			t.Fatalf("datagram of %d bytes differs", n)
		}
	}
	if s := p.LinkStats(0); s.TxPIO == 0 || s.TxSDMA == 0 {
		t.Errorf("%+v", s)
	}
}

// rmaOps runs send/recv, RDMA write and RDMA read of each size from a to
// b, checking the bytes.
func rmaOps(t *testing.T, a, b *side, sizes []int) {
	t.Helper()
	for i, n := range sizes {
		// Send/recv: a's bytes land in b's receive buffer.
		want := fill(a.buf[:n], i)
		dst := b.buf[bufSize-n:]
		clear(dst)
		if err := b.ep.Recv(dst, b.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
			t.Fatal(err)
		}
		if err := a.ep.Send(want, a.mr.Desc(), fabric.AddrUnspec, 2); err != nil {
			t.Fatal(err)
		}
		wait(t, a, b, 1, 1)
		if !bytes.Equal(dst, want) {
			t.Fatalf("send %d bytes: received data differs", n)
		}

		// RDMA write: a's bytes into b's buffer at an offset.
		want = fill(a.buf[:n], i+100)
		off := uint64(i * 7)
		if err := a.ep.Write(want, a.mr.Desc(), fabric.AddrUnspec, b.mr.Addr()+off, b.mr.Key(), 3); err != nil {
			t.Fatal(err)
		}
		wait(t, a, b, 1, 0)
		if !bytes.Equal(b.buf[off:off+uint64(n)], want) {
			t.Fatalf("write %d bytes: placed data differs", n)
		}

		// RDMA read: b's bytes into a's buffer.
		src := fill(b.buf[:n], i+200)
		got := a.buf[bufSize-n:]
		clear(got)
		if err := a.ep.Read(got, a.mr.Desc(), fabric.AddrUnspec, b.mr.Addr(), b.mr.Key(), 4); err != nil {
			t.Fatal(err)
		}
		wait(t, a, b, 1, 0)
		if !bytes.Equal(got, src) {
			t.Fatalf("read %d bytes: data differs", n)
		}
	}

}

// atomicOps runs a fetch-and-add and a compare-and-swap from a on b's
// first word.
func atomicOps(t *testing.T, a, b *side) {
	t.Helper()
	le := binary.LittleEndian
	le.PutUint64(b.buf, 41)
	le.PutUint64(a.buf[8:], 1)
	if err := a.ep.FetchAtomic(fabric.AtomicSum, fabric.Uint64, a.buf[8:16], a.mr.Desc(), a.buf[16:24], a.mr.Desc(),
		fabric.AddrUnspec, b.mr.Addr(), b.mr.Key(), 5); err != nil {
		t.Fatal(err)
	}
	wait(t, a, b, 1, 0)
	if old, now := le.Uint64(a.buf[16:]), le.Uint64(b.buf); old != 41 || now != 42 {
		t.Fatalf("fetch-add: old %d, now %d; want 41, 42", old, now)
	}
	le.PutUint64(a.buf[24:], 42) // compare
	le.PutUint64(a.buf[32:], 7)  // swap
	if err := a.ep.CompareAtomic(fabric.AtomicCSwap, fabric.Uint64, a.buf[32:40], a.mr.Desc(), a.buf[24:32], a.mr.Desc(),
		a.buf[40:48], a.mr.Desc(), fabric.AddrUnspec, b.mr.Addr(), b.mr.Key(), 6); err != nil {
		t.Fatal(err)
	}
	wait(t, a, b, 1, 0)
	if old, now := le.Uint64(a.buf[40:]), le.Uint64(b.buf); old != 42 || now != 7 {
		t.Fatalf("compare-swap: old %d, now %d; want 42, 7", old, now)
	}
}
