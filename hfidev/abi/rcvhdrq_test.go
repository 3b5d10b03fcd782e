package abi

import (
	"errors"
	"testing"
)

// hfi1-abi.md §3: RHF last, header at HdrqOffset dwords, payload at
// EgrIndex×rcvegr_size + EgrOffset×64, PktLen counting the ICRC.
func TestHdrqEntrySplit(t *testing.T) {
	e := HdrqEntry(make([]byte, 128))
	if e.RHFOffset() != 120 {
		t.Fatalf("RHF at %d", e.RHFOffset())
	}
	egr := make([]byte, 4*4096)
	l := RcvLayout{Egr: egr, EgrSize: 4096, EgrTIDs: 4, HdrBytes: Header9BSize}
	f := RHFFields{PktLen: (56+100)/4 + 1, UseEgrBfr: true, EgrIndex: 2, EgrOffset: 3, HdrqOffset: 2}
	hdr, payload, err := e.Split(&f, &l)
	if err != nil || &hdr[0] != &e[8] || len(hdr) != 56 || &payload[0] != &egr[2*4096+192] || len(payload) != 100 {
		t.Fatalf("split: %v, hdr %d bytes, payload %d bytes", err, len(hdr), len(payload))
	}
	for _, c := range []struct {
		name string
		mut  func(*RHFFields)
		want error
	}{
		{"header over the RHF", func(f *RHFFields) { f.HdrqOffset = 17 }, ErrEntryHeader},
		{"index beyond egrtids", func(f *RHFFields) { f.EgrIndex = 4 }, ErrEntryEager},
		{"crossing into the next buffer", func(f *RHFFields) { f.EgrOffset = 63 }, ErrEntryEager},
		{"shorter than its header", func(f *RHFFields) { f.PktLen = 10 }, ErrEntryEager},
	} {
		g := f
		c.mut(&g)
		if _, _, err := e.Split(&g, &l); !errors.Is(err, c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	f.UseEgrBfr = false
	if _, p, err := e.Split(&f, &l); err != nil || p != nil {
		t.Errorf("header-only: %v %d", err, len(p))
	}
}
