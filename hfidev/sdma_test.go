package hfidev

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
)

// split cuts b into n iovecs of uneven lengths.
func split(b []byte, n int) [][]byte {
	var out [][]byte
	for i := n; i > 1 && len(b) > 0; i-- {
		k := len(b) / (i + 1)
		out, b = append(out, b[:k]), b[k:]
	}
	return append(out, b)
}

// hfi1-abi.md §4 "Per-packet rewrite": one request becomes npkts packets of
// fragsize bytes; the driver rewrites PBC/LRH lengths, PSN (+1 per packet),
// BTH.A on the last, KDETH SWData[6] (the byte offset). They arrive at B
// byte-exact, in order, and the slot completes.
func TestSDMASendReceive(t *testing.T) {
	chips(t, func(t *testing.T, chip abi.Chip) {
		l := newLink(t, chip, nil)
		s, r := l.a.SDMA(), l.b.Receiver()
		if s == nil {
			t.Fatal("no SDMA")
		}
		const frag = 4096
		hdr := make([]byte, abi.Header9BSize)
		for i, size := range []int{0, 3, 4, 100, 4096, 4097, 10000, 65536 + 12} {
			kdethHeader(hdr, l.a, l.b, 1000, 0)
			abi.Header9B(hdr).SetSWData(6, 0x100) // the starting offset
			msg := pattern(size, byte(i))
			pbc := (&abi.PBCFields{VL: 0}).Encode(chip)
			slot, err := s.Submit(pbc, hdr, frag, split(msg, 1+i%8))
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			npkts := max(1, (size+frag-1)/frag)
			var got []byte
			for k := range npkts {
				p, ok := r.Poll()
				if !ok || p.Err != nil {
					t.Fatalf("%d bytes: packet %d: %v %v", size, k, ok, p)
				}
				h := p.Header
				n := min(frag, size-k*frag)
				if size == 0 {
					n = 0
				}
				wantPSN := uint32(1000 + k)
				if h.PSN() != wantPSN || h.AckReq() != (k > 0 && k == npkts-1) || h.SWData(6) != uint32(0x100+k*frag) ||
					int(h.PktLen()) != (56+4+(n+3)&^3)/4 || h.SWData(0) != 1000 {
					t.Errorf("%d bytes, packet %d: PSN %d A %v off %#x len %d", size, k, h.PSN(), h.AckReq(), h.SWData(6), h.PktLen())
				}
				// The payload is padded to a dword on the wire.
				if len(p.Payload) != (n+3)&^3 {
					t.Fatalf("%d bytes, packet %d: %d payload bytes", size, k, len(p.Payload))
				}
				got = append(got, p.Payload[:n]...)
				r.Release()
			}
			if !bytes.Equal(got, msg) {
				t.Errorf("%d bytes: message differs", size)
			}
			c, ok := s.Reap()
			if !ok || c.Slot != slot || c.Status != abi.SDMAComplete {
				t.Errorf("%d bytes: completion %+v %v", size, c, ok)
			}
		}
		if _, ok := r.Poll(); ok {
			t.Error("an extra packet")
		}
	})
}

// Completions are reaped in submission order even when they complete out
// of order; the ring has one slot of slack; a request the driver refuses
// after claiming its slot does not use it up.
func TestSDMACompletionOrder(t *testing.T) {
	l := newLink(t, abi.ChipWFR, func(c *model.Config) { c.SDMARingSize = 8 })
	s := l.a.SDMA()
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, l.a, l.b, 1, 0)
	data := [][]byte{pattern(256, 1)}
	l.ua.HoldSDMACompletions(true)
	for i := range 7 {
		if slot, err := s.Submit(0, hdr, 4096, data); err != nil || slot != uint16(i) {
			t.Fatalf("submit %d: slot %d, %v", i, slot, err)
		}
	}
	if _, err := s.Submit(0, hdr, 4096, data); !errors.Is(err, ErrSDMARingFull) {
		t.Fatalf("eighth request: %v", err)
	}
	if _, ok := s.Reap(); ok {
		t.Fatal("reaped a queued request")
	}
	l.ua.ReleaseSDMACompletions(3, true) // slots 6, 5, 4
	if _, ok := s.Reap(); ok {
		t.Fatal("reaped past queued slot 0")
	}
	l.ua.ReleaseSDMACompletions(-1, false)
	for i := range 7 {
		if c, ok := s.Reap(); !ok || c.Slot != uint16(i) || c.Status != abi.SDMAComplete {
			t.Fatalf("reap %d: %+v %v", i, c, ok)
		}
	}
	l.ua.HoldSDMACompletions(false)
	// Refused after the claim (fragsize not a multiple of 64): EINVAL, and
	// the slot is free for the next request.
	if _, err := s.Submit(0, hdr, 1000, data); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("fragsize 1000: %v", err)
	}
	if slot, err := s.Submit(0, hdr, 4096, data); err != nil || slot != 7 || s.InFlight() != 1 {
		t.Fatalf("after a refused request: slot %d, %v", slot, err)
	}
	if _, err := s.Submit(0, hdr, 4096, make([][]byte, 9)); !errors.Is(err, ErrSDMARequest) {
		t.Errorf("9 iovecs: %v", err)
	}
}

// Submit and Reap do not allocate.
func TestSDMAAllocs(t *testing.T) {
	l := newLink(t, abi.ChipWFR, nil)
	s, r := l.a.SDMA(), l.b.Receiver()
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, l.a, l.b, 1, 0)
	data := [][]byte{pattern(6000, 1), pattern(3000, 2)}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := s.Submit(0, hdr, 4096, data); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Reap(); !ok {
			t.Fatal("no completion")
		}
		for {
			if _, ok := r.Poll(); !ok {
				break
			}
			r.Release()
		}
	})
	if allocs != 0 {
		t.Errorf("Submit+Reap: %v allocs", allocs)
	}
}

// BenchmarkSDMAToRecv is one 64 KiB message through the model: one writev,
// 16 packets of 4 KiB through the wire into B's RcvHdrQ and eager buffers,
// polled and released there, the completion reaped. pkt-ns is per packet.
func BenchmarkSDMAToRecv(b *testing.B) {
	l := newLink(b, abi.ChipWFR, nil)
	s := l.a.SDMA()
	hdr := make([]byte, abi.Header9BSize)
	kdethHeader(hdr, l.a, l.b, 1, 0)
	const size, frag = 64 << 10, 4096
	data := [][]byte{pattern(size, 1)}
	benchSDMA(b, l, size, frag, func() error {
		_, err := s.Submit(0, hdr, frag, data)
		return err
	})
}

// benchSDMA runs submit b.N times, each a size-byte message in frag-byte
// packets that B's receiver polls and releases before the completion is
// reaped, and reports pkt-ns, the time per packet.
func benchSDMA(b *testing.B, l *link, size, frag int, submit func() error) {
	s, r := l.a.SDMA(), l.b.Receiver()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := submit(); err != nil {
			b.Fatal(err)
		}
		for range size / frag {
			if _, ok := r.Poll(); !ok {
				b.Fatal("lost a packet")
			}
			r.Release()
		}
		if _, ok := s.Reap(); !ok {
			b.Fatal("no completion")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size/frag), "pkt-ns")
}
