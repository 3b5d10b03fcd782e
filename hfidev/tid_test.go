package hfidev

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// tidBuf is page-aligned memory filled with 0xEE, unmapped at cleanup.
func tidBuf(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := sys.AllocPages(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sys.FreePages(b) })
	for i := range b {
		b[i] = 0xee
	}
	return b
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// expectedHeader is the first packet's 9B header for an EXPECTED request
// from a to b: PSN psn, SWData[6] the starting byte offset koff.
func expectedHeader(from, to *Context, psn uint32, koff uint32) []byte {
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, from, to, psn, 0)
	abi.Header9B(hdr).SetSWData(6, koff)
	return hdr
}

// pbc9B is a PBC for a 9B packet to context to: on JKR L2Type 9B and the
// DLID, as the chip wants them.
func pbc9B(chip abi.Chip, to *Context) abi.PBC {
	return (&abi.PBCFields{L2Type: abi.L2Type9B, DLID: uint32(lid(to))}).Encode(chip)
}

// tidStart is where entry e begins in m.Buf.
func tidStart(t *testing.T, m *TIDMap, pair uint16, ctrl uint8) int {
	at := 0
	for _, e := range m.Entries {
		if e.Pair() == pair && e.Ctrl() == ctrl {
			return at
		}
		at += e.Bytes()
	}
	t.Fatalf("TID %d/%d is not the buffer's", pair, ctrl)
	return 0
}

// hfi1-abi.md §5: a transfer sent EXPECTED lands byte-exact in the
// receiver's programmed buffer at its offset: every packet a header-only
// RcvHdrQ entry of RcvType expected, nothing in the eager buffers, each
// header naming the TID, TIDCtrl and offset (64-byte units for entries of
// 128 KiB and more) where its payload went, the PSN's low 11 bits
// advancing (and wrapping) under a fixed generation.
func TestTIDTransfer(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		for _, tc := range []struct {
			run, size, off, frag int
		}{
			{0, 64 << 10, 0, 4096},            // one 16-page entry, 4-byte offsets
			{0, 2 << 20, 0, 4096},             // one 2 MiB entry, 64-byte offsets
			{0, 1<<20 + 4, 3*4096 + 64, 2048}, // entries of 256, 4 and 1 pages; an odd tail
			{16, 2 << 20, 0, 4096},            // 32 entries of 64 KiB
			{1, 200 << 10, 4096 + 12, 4096},   // one page per entry: packets stop at each page
			{3, 1 << 20, 100 * 4, 8128},       // runs of 3 pages: 2+1-page entries, large fragments
		} {
			l := newLink(t, chip, func(c *model.Config) { c.TIDPhysRunPages = tc.run })
			buf := tidBuf(t, tc.off+tc.size+abi.PageSize)
			m, err := l.b.TIDUpdate(buf)
			if err != nil || len(m.Buf) != len(buf) {
				t.Fatalf("%+v: TIDUpdate: %v", tc, err)
			}
			tids, toff, ok := m.From(tc.off)
			if !ok {
				t.Fatal("offset outside the map")
			}
			msg := pattern(tc.size, byte(tc.run))
			const psn0 = 0x1237f0
			hdr := expectedHeader(l.a, l.b, psn0, 0x40)
			slot, err := l.a.SDMA().SubmitExpected(pbc9B(chip, l.b), hdr, tc.frag, split(msg, 3), tids, toff)
			if err != nil {
				t.Fatalf("%+v: %v", tc, err)
			}
			npkts, _, _, _ := expectedPackets(tids, toff, tc.frag, tc.size)
			r := l.b.Receiver()
			for k := range npkts {
				p, ok := r.Poll()
				if !ok || p.Err != nil || p.Fields.RcvType != abi.RcvTypeExpected || p.Fields.UseEgrBfr || p.Payload != nil {
					t.Fatalf("%+v: packet %d: %v %+v", tc, k, ok, p)
				}
				h := p.Header
				at := tidStart(t, m, h.TID(), h.TIDCtrl()) + h.TIDOffset()
				if at != tc.off+int(h.SWData(6)-0x40) {
					t.Fatalf("%+v: packet %d names byte %d, its data is byte %d", tc, k, at, tc.off+int(h.SWData(6)-0x40))
				}
				e, _, _ := m.From(at)
				if h.OM() != (e[0].Bytes() >= abi.KDETHOMMaxSize) {
					t.Errorf("%+v: packet %d: OM %v for a %d-byte entry", tc, k, h.OM(), e[0].Bytes())
				}
				if want := uint32(psn0&^0x7ff | (psn0+k)&0x7ff); h.PSN() != want || h.AckReq() != (k > 0 && k == npkts-1) {
					t.Errorf("%+v: packet %d: PSN %#x A %v, want %#x", tc, k, h.PSN(), h.AckReq(), want)
				}
				r.Release()
			}
			if _, ok := r.Poll(); ok {
				t.Fatalf("%+v: more than %d packets", tc, npkts)
			}
			if !bytes.Equal(buf[tc.off:tc.off+tc.size], msg) {
				t.Errorf("%+v: the buffer differs from the message", tc)
			}
			if !untouched(buf[:tc.off]) || !untouched(buf[tc.off+tc.size:]) {
				t.Errorf("%+v: bytes outside the message were written", tc)
			}
			st := rcvStats(t, l.ub, l.b)
			if st.Expected != uint64(npkts) || st.Eager != 0 || st.TIDErr != 0 || st.Packets != uint64(npkts) {
				t.Errorf("%+v: stats %+v, %d packets", tc, st, npkts)
			}
			if c, ok := l.a.SDMA().Reap(); !ok || c.Slot != slot || c.Status != abi.SDMAComplete {
				t.Errorf("%+v: completion %+v %v", tc, c, ok)
			}
			if err := l.b.TIDFree(m.Entries); err != nil {
				t.Errorf("%+v: TIDFree: %v", tc, err)
			}
		}
	})
}

// untouched reports whether b still holds tidBuf's fill.
func untouched(b []byte) bool {
	for _, v := range b {
		if v != 0xee {
			return false
		}
	}
	return true
}

// recvTIDErrs polls n packets and checks each is a header-only ErrTID.
func recvTIDErrs(t *testing.T, r *Receiver, n int) {
	t.Helper()
	for k := range n {
		p, ok := r.Poll()
		if !ok || !errors.Is(p.Err, ErrTID) || p.Fields.RcvType != abi.RcvTypeExpected || p.Payload != nil {
			t.Fatalf("packet %d: %v %+v", k, ok, p)
		}
		r.Release()
	}
	if _, ok := r.Poll(); ok {
		t.Fatal("an extra packet")
	}
}

// Every TID failure the API can meet: the RcvArray share exhausted (a
// partial map, then ENOSPC), a buffer that is not page-aligned, freeing
// entries the context does not own or that name nothing, a TID invalidated
// under the sender (TidErr, the event bit, TID_INVAL_READ), a TID used
// after TID_FREE, an offset past the TID (the sender's entries lie about
// its length), and requests SubmitExpected refuses.
func TestTIDFailures(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, func(c *model.Config) {
			c.EgrTIDs, c.RcvTIDs, c.TIDPhysRunPages = 16, 16+32, 1 // 32 entries of a page
		})
		b, s, r := l.b, l.a.SDMA(), l.b.Receiver()
		pbc := pbc9B(chip, b)
		if _, err := b.TIDUpdate(tidBuf(t, 2*abi.PageSize)[64:]); !errors.Is(err, ErrTIDBuffer) {
			t.Errorf("unaligned buffer: %v", err)
		}
		big := tidBuf(t, 34*abi.PageSize)
		m, err := b.TIDUpdate(big[:30*abi.PageSize])
		if err != nil || len(m.Entries) != 30 {
			t.Fatal(err)
		}
		m2, err := b.TIDUpdate(big[30*abi.PageSize:])
		if err != nil || len(m2.Entries) != 2 || len(m2.Buf) != 2*abi.PageSize {
			t.Fatalf("partial: %v, %d entries, %d bytes", err, len(m2.Entries), len(m2.Buf))
		}
		if _, err := b.TIDUpdate(tidBuf(t, abi.PageSize)); !errors.Is(err, unix.ENOSPC) {
			t.Errorf("exhausted: %v", err)
		}
		if err := b.TIDFree(m2.Entries); err != nil {
			t.Fatal(err)
		}
		if err := b.TIDFree(m2.Entries[:1]); !errors.Is(err, unix.EBADF) {
			t.Errorf("free unowned: %v", err)
		}
		if err := b.TIDFree([]abi.TIDEntry{abi.MakeTIDEntry(1, abi.TIDCtrlBad, 0)}); !errors.Is(err, unix.EINVAL) {
			t.Errorf("free CTRL 3: %v", err)
		}

		// Stale: m2's entries were freed; a packet naming them gets TidErr.
		msg := pattern(2*4096, 7)
		hdr := expectedHeader(l.a, b, 1, 0)
		if _, err := s.SubmitExpected(pbc, hdr, 4096, [][]byte{msg}, m2.Entries, 0); err != nil {
			t.Fatal(err)
		}
		recvTIDErrs(t, r, 2)

		// Invalidated: the chip stops using the entries over the range.
		inval := l.ub.InvalidateRange(addrOf(m.Buf[8*abi.PageSize:]), abi.PageSize)
		if inval != 1 || b.Events()&abi.EventTIDMMUNotify == 0 {
			t.Fatalf("invalidated %d, events %#x", inval, b.Events())
		}
		tids, off, _ := m.From(8 * abi.PageSize)
		if _, err := s.SubmitExpected(pbc, hdr, 4096, [][]byte{msg[:4096]}, tids, off); err != nil {
			t.Fatal(err)
		}
		recvTIDErrs(t, r, 1)
		got, err := b.TIDInvalidated(nil)
		if err != nil || len(got) != 1 || got[0] != m.Entries[8] || b.Events()&abi.EventTIDMMUNotify != 0 {
			t.Errorf("TIDInvalidated: %v %#x, events %#x", err, got, b.Events())
		}

		// Past the end: the sender claims 2 pages for a 1-page entry.
		liar := []abi.TIDEntry{abi.MakeTIDEntry(2, m.Entries[0].Ctrl(), m.Entries[0].Pair())}
		if _, err := s.SubmitExpected(pbc, hdr, 4096, [][]byte{msg[:4096]}, liar, abi.PageSize); err != nil {
			t.Fatal(err)
		}
		recvTIDErrs(t, r, 1)
		if !untouched(m.Buf) {
			t.Error("a refused packet wrote the buffer")
		}
		if st := rcvStats(t, l.ub, b); st.TIDErr != 4 || st.Expected != 0 || st.Eager != 0 {
			t.Errorf("stats %+v", st)
		}
		if ts, ok := l.ub.TIDStats(b.Info.Ctxt); !ok || ts.Programmed != 32 || ts.Freed != 2 || ts.Invalidated != 1 {
			t.Errorf("TID stats %+v", ts)
		}

		// Requests the driver could not express.
		for _, tc := range []struct {
			name string
			n    int
			tids []abi.TIDEntry
			off  int
			frag int
		}{
			{"offset not a multiple of 4", 8, m.Entries, 2, 4096},
			{"offset past the entry", 8, m.Entries[:1], abi.PageSize, 4096},
			{"more data than the entries map", abi.PageSize + 1, m.Entries[:1], 0, 4096},
			{"no entries", 8, nil, 0, 4096},
			{"fragment not a multiple of 64", 8, m.Entries, 0, 1000},
		} {
			if _, err := s.SubmitExpected(pbc, hdr, tc.frag, [][]byte{make([]byte, tc.n)}, tc.tids, tc.off); !errors.Is(err, ErrSDMARequest) {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
		for range 3 {
			if c, ok := s.Reap(); !ok || c.Status != abi.SDMAComplete {
				t.Errorf("completion %+v %v", c, ok)
			}
		}
		if err := b.TIDFree(m.Entries); err != nil {
			t.Errorf("free after invalidation: %v", err)
		}
	})
}

// SubmitExpected, Reap, Poll and Release do not allocate.
func TestSDMAExpectedAllocs(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	m, err := l.b.TIDUpdate(tidBuf(t, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	s, r := l.a.SDMA(), l.b.Receiver()
	hdr := expectedHeader(l.a, l.b, 1, 0)
	data := [][]byte{pattern(40000, 1), pattern(20000, 2)}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := s.SubmitExpected(0, hdr, 4096, data, m.Entries, 1024); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Reap(); !ok {
			t.Fatal("no completion")
		}
		for {
			p, ok := r.Poll()
			if !ok {
				break
			}
			if p.Err != nil {
				t.Fatal(p.Err)
			}
			r.Release()
		}
	})
	if allocs != 0 {
		t.Errorf("SubmitExpected+Reap: %v allocs", allocs)
	}
}

// BenchmarkSDMAExpectedToRecv is BenchmarkSDMAToRecv's 64 KiB message sent
// EXPECTED: the model places each 4 KiB packet in the programmed buffer
// and writes a header-only entry. pkt-ns is per packet.
func BenchmarkSDMAExpectedToRecv(b *testing.B) {
	l := newLink(b, abi.ChipWFR, nil)
	const size, frag = 64 << 10, 4096
	m, err := l.b.TIDUpdate(tidBuf(b, size))
	if err != nil {
		b.Fatal(err)
	}
	s := l.a.SDMA()
	hdr := expectedHeader(l.a, l.b, 1, 0)
	data := [][]byte{pattern(size, 1)}
	benchSDMA(b, l, size, frag, func() error {
		_, err := s.SubmitExpected(0, hdr, frag, data, m.Entries, 0)
		return err
	})
}

// FuzzExpectedPackets: any tidlist, offset, fragment and length either is
// refused or cuts into packets that cover the data exactly, none larger
// than the fragment, none crossing an entry.
func FuzzExpectedPackets(f *testing.F) {
	f.Add([]byte{0x10, 0, 0x10, 0, 0x01, 0, 0x20, 0}, 0, 4096, 65536)
	f.Add([]byte{0x00, 0x02, 0x10, 0}, 64, 4096, 2<<20)
	f.Fuzz(func(t *testing.T, raw []byte, off, frag, total int) {
		tids := make([]abi.TIDEntry, abi.TIDList(raw).Len())
		for i := range tids {
			tids[i] = abi.TIDList(raw).At(i)
		}
		total &= 1<<24 - 1
		npkts, used, first, ok := expectedPackets(tids, off, frag, total)
		if !ok {
			return
		}
		if used < 1 || used > len(tids) || npkts < 1 || first > frag || first > total {
			t.Fatalf("npkts %d used %d first %d", npkts, used, first)
		}
		covered := tids[0].Bytes() - off
		for _, e := range tids[1:used] {
			covered += e.Bytes()
		}
		if covered < total || npkts < (total+frag-1)/frag {
			t.Fatalf("%d bytes in %d packets over %d bytes of entries", total, npkts, covered)
		}
	})
}

// The sender's SDMA, the receiver's poller and the receiver's TID calls on
// three goroutines, with the buffer's second half invalidated half-way
// (run it under -race): every packet is placed, refused with TidErr, or
// dropped on a full RcvHdrQ, once.
func TestTIDConcurrent(t *testing.T) {
	l := newLink(t, abi.ChipWFR, func(c *model.Config) { c.RcvHdrqCnt, c.TIDPhysRunPages = 64, 4 })
	const size, frag, rounds = 64 << 10, 4096, 200
	m, err := l.b.TIDUpdate(tidBuf(t, size))
	if err != nil {
		t.Fatal(err)
	}
	var polled, placed, refused int
	sent, done := make(chan struct{}), make(chan struct{})
	go func() { // B's poller, until the sender is done and the queue empty
		defer close(done)
		r := l.b.Receiver()
		for {
			p, ok := r.Poll()
			if !ok {
				select {
				case <-sent:
					if _, ok := r.Poll(); !ok {
						return
					}
				default:
					runtime.Gosched()
				}
				continue
			}
			polled++
			switch {
			case p.Err == nil && p.Fields.RcvType == abi.RcvTypeExpected:
				placed++
			case errors.Is(p.Err, ErrTID):
				refused++
			default:
				t.Errorf("packet %+v", p)
			}
			r.Release()
		}
	}()
	go func() { // A's sender
		defer close(sent)
		s := l.a.SDMA()
		hdr := expectedHeader(l.a, l.b, 1, 0)
		data := [][]byte{pattern(size, 3)}
		for range rounds {
			if _, err := s.SubmitExpected(0, hdr, frag, data, m.Entries, 0); err != nil {
				t.Error(err)
				return
			}
			if _, ok := s.Reap(); !ok {
				t.Error("no completion")
			}
		}
	}()
	for len(m.Entries) > 0 { // B's TID calls, meanwhile
		if l.ub.InvalidateRange(addrOf(m.Buf[size/2:]), size/2) > 0 {
			break
		}
	}
	<-done
	got, err := l.b.TIDInvalidated(nil)
	if err != nil || len(got) != len(m.Entries)/2 {
		t.Errorf("invalidated %d of %d entries: %v", len(got), len(m.Entries), err)
	}
	if err := l.b.TIDFree(m.Entries); err != nil {
		t.Error(err)
	}
	st := rcvStats(t, l.ub, l.b)
	if uint64(placed) != st.Expected || uint64(refused) != st.TIDErr || uint64(polled) != st.Packets ||
		st.Packets+st.HdrqFull != rounds*size/frag || st.Eager != 0 {
		t.Errorf("polled %d (%d placed, %d refused); stats %+v", polled, placed, refused, st)
	}
}
