package abi

import "testing"

// rcventry2tidinfo and back: entry 2k is pair k with CTRL 1, entry 2k+1
// CTRL 2; CTRL 0 and 3 name no entry.
func TestTIDEntryFor(t *testing.T) {
	for _, tc := range []struct {
		entry int
		pages uint32
		want  TIDEntry
	}{
		{0, 1, 1<<20 | 1},
		{1, 16, 2<<20 | 16},
		{2047, 512, 1023<<22 | 2<<20 | 512},
	} {
		e := TIDEntryFor(tc.entry, tc.pages)
		got, ok := e.RcvEntry()
		if e != tc.want || !ok || got != tc.entry || e.Bytes() != int(tc.pages)*PageSize {
			t.Errorf("entry %d: %#x (%d, %v), want %#x", tc.entry, uint32(e), got, ok, uint32(tc.want))
		}
	}
	for _, ctrl := range []uint8{0, TIDCtrlBad} {
		if _, ok := MakeTIDEntry(1, ctrl, 3).RcvEntry(); ok {
			t.Errorf("CTRL %d names an entry", ctrl)
		}
	}
	if TIDEntryFor(0, 31).OMUnit() != KDETHOMSmall || TIDEntryFor(0, 32).OMUnit() != KDETHOMLarge {
		t.Error("OM switches at 128 KiB")
	}
}

// SetKDETHTID writes TID, TIDCtrl, Offset and OM in the entry's unit and
// keeps Intr, SH and KVer; TIDOffset reads the byte offset back.
func TestSetKDETHTID(t *testing.T) {
	h := make(Header9B, Header9BSize)
	(&Header9BFields{BTHKDETHFields: BTHKDETHFields{KVer: KDETHVersion, SH: true, KDETHIntr: true, KDETHOffset: 0x7fff, OM: true}}).Encode(h)
	for _, tc := range []struct {
		e   TIDEntry
		off int
		om  bool
	}{
		{TIDEntryFor(5, 1), 4092, false},
		{TIDEntryFor(1000, 512), 2<<20 - 64, true},
		{TIDEntryFor(2, 32), 128, true},
	} {
		h.SetKDETHTID(tc.e, tc.off)
		pair, ctrl := tc.e.Pair(), tc.e.Ctrl()
		if h.TID() != pair || h.TIDCtrl() != ctrl || h.OM() != tc.om || h.TIDOffset() != tc.off ||
			h.KVer() != KDETHVersion || !h.SH() || !h.KDETHIntr() {
			t.Errorf("%#x at %d: %+v", uint32(tc.e), tc.off, h.Decode())
		}
	}
}
