package psn

import "testing"

func TestWrap(t *testing.T) {
	last := PSN(Mask)
	if got := last.Next(); got != 0 {
		t.Fatalf("Mask.Next() = %d, want 0", got)
	}
	if got := PSN(0).Sub(1); got != last {
		t.Fatalf("0.Sub(1) = %#x, want %#x", got, last)
	}
	if got := last.Add(5); got != 4 {
		t.Fatalf("Mask.Add(5) = %d, want 4", got)
	}
	if got := New(0x01abcdef); got != 0xabcdef {
		t.Fatalf("New masks to 24 bits: got %#x", got)
	}
}

func TestCompareAcrossWrap(t *testing.T) {
	tests := []struct {
		a, b PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, Mask, 1},      // 0 follows 0xffffff
		{Mask, 0, -1},     // 0xffffff precedes 0
		{5, Mask - 4, 10}, // across the wrap
		{Half - 1, 0, Half - 1},
		{Half, 0, -Half}, // exactly half: reads as behind
		{Mask - 2, 3, -6},
	}
	for _, tc := range tests {
		if got := tc.a.Diff(tc.b); got != tc.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tc.a, tc.b, got, tc.diff)
		}
		if got, want := tc.a.Before(tc.b), tc.diff < 0; got != want {
			t.Errorf("%#x.Before(%#x) = %v, want %v", tc.a, tc.b, got, want)
		}
		if got, want := tc.a.After(tc.b), tc.diff > 0; got != want {
			t.Errorf("%#x.After(%#x) = %v, want %v", tc.a, tc.b, got, want)
		}
		if got, want := tc.a.BeforeEq(tc.b), tc.diff <= 0; got != want {
			t.Errorf("%#x.BeforeEq(%#x) = %v, want %v", tc.a, tc.b, got, want)
		}
	}
}

func TestInWindow(t *testing.T) {
	first := PSN(Mask - 1)
	for i, want := range []bool{true, true, true, true, false} {
		p := first.Add(uint32(i))
		if got := p.InWindow(first, 4); got != want {
			t.Errorf("%#x.InWindow(%#x, 4) = %v, want %v", p, first, got, want)
		}
	}
	if first.Sub(1).InWindow(first, 4) {
		t.Error("PSN just before the window reported inside it")
	}
}

func TestDiffProperty(t *testing.T) {
	// b.Add(d).Diff(b) == d for every d in range, at many bases including the wrap.
	for _, base := range []PSN{0, 1, Mask, Mask - 7, Half, Half - 1, 0x123456} {
		for _, d := range []int32{0, 1, -1, 7, -7, Half - 1, -Half, 1 << 20, -(1 << 20)} {
			p := base.Add(uint32(d))
			if got := p.Diff(base); got != d {
				t.Errorf("(%#x+%d).Diff(%#x) = %d", base, d, base, got)
			}
		}
	}
}
