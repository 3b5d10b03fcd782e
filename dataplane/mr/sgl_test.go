package mr

import (
	"bytes"
	"fmt"
	"math"
	"testing"
)

// sglFixture is a message spread over three regions, with zero-length SGEs,
// two SGEs in one region and gaps between them, plus a reference model: for
// each message byte, the region buffer and offset that hold it.
type sglFixture struct {
	tb   *Table
	bufs [][]byte
	sgl  []SGE
	pos  []struct{ buf, off int }
}

func newSGLFixture(t testing.TB) *sglFixture {
	f := &sglFixture{tb: NewTable(8)}
	iovas := []uint64{0, 0x7000_0000, 1 << 40}
	var regs []*Region
	for i, n := range []int{40, 30, 50} {
		buf := make([]byte, n)
		f.bufs = append(f.bufs, buf)
		regs = append(regs, mustRegisterAt(t, f.tb, buf, iovas[i], LocalWrite))
	}
	type piece struct{ reg, off, n int }
	for _, p := range []piece{
		{0, 3, 5},
		{1, 0, 0}, // zero-length
		{2, 10, 17},
		{0, 20, 1},
		{1, 2, 28}, // up to the end of region 1
		{2, 0, 0},  // zero-length
		{0, 30, 9},
		{2, 49, 1}, // last byte of region 2
	} {
		f.sgl = append(f.sgl, SGE{Addr: iovas[p.reg] + uint64(p.off), Length: uint32(p.n), LKey: regs[p.reg].LKey()})
		for i := range p.n {
			f.pos = append(f.pos, struct{ buf, off int }{p.reg, p.off + i})
		}
	}
	return f
}

// fill gives every region byte a distinct value and returns the message the
// model says the SGL describes.
func (f *sglFixture) fill(seed byte) []byte {
	v := seed
	for _, b := range f.bufs {
		for i := range b {
			b[i] = v
			v += 7
		}
	}
	msg := make([]byte, len(f.pos))
	for i, p := range f.pos {
		msg[i] = f.bufs[p.buf][p.off]
	}
	return msg
}

func (f *sglFixture) snapshot() [][]byte {
	var s [][]byte
	for _, b := range f.bufs {
		s = append(s, bytes.Clone(b))
	}
	return s
}

func TestGatherEveryOffset(t *testing.T) {
	f := newSGLFixture(t)
	msg := f.fill(1)
	total := SGLLen(f.sgl)
	if total != len(msg) {
		t.Fatalf("SGLLen = %d, model says %d", total, len(msg))
	}
	for off := 0; off <= total; off++ {
		for n := 0; n <= total-off+2; n++ {
			dst := bytes.Repeat([]byte{0xee}, n+1) // one guard byte past dst
			got, err := f.tb.Gather(dst[:n], f.sgl, off)
			if err != nil {
				t.Fatalf("Gather(%d bytes, off %d): %v", n, off, err)
			}
			want := msg[off:min(off+n, total)]
			if got != len(want) || !bytes.Equal(dst[:got], want) {
				t.Fatalf("Gather(%d bytes, off %d) = %d %x, want %d %x", n, off, got, dst[:got], len(want), want)
			}
			for _, c := range dst[got:] {
				if c != 0xee {
					t.Fatalf("Gather(%d bytes, off %d) wrote past what it reported", n, off)
				}
			}
		}
	}
}

func TestScatterEveryOffset(t *testing.T) {
	f := newSGLFixture(t)
	total := SGLLen(f.sgl)
	for off := 0; off <= total; off++ {
		for n := 0; n <= total-off; n++ {
			f.fill(byte(off + n))
			want := f.snapshot()
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(0x80 | i)
				p := f.pos[off+i]
				want[p.buf][p.off] = src[i]
			}
			got, err := f.tb.Scatter(f.sgl, off, src)
			if err != nil || got != n {
				t.Fatalf("Scatter(off %d, %d bytes) = %d, %v", off, n, got, err)
			}
			for i := range want {
				if !bytes.Equal(f.bufs[i], want[i]) {
					t.Fatalf("Scatter(off %d, %d bytes): region %d = %x, want %x", off, n, i, f.bufs[i], want[i])
				}
			}
		}
	}
}

func TestSGLErrors(t *testing.T) {
	tb := NewTable(8)
	buf := make([]byte, 64)
	rw := mustRegisterAt(t, tb, buf, 0, LocalWrite)
	ro := mustRegisterAt(t, tb, make([]byte, 64), 0x100, RemoteRead)
	dst := make([]byte, 64)

	ok := SGE{0, 16, rw.LKey()}
	for _, tc := range []struct {
		name    string
		sgl     []SGE
		off     int
		n       int // bytes to gather or scatter
		gatherN int
		gather  error
		scatN   int
		scatter error
	}{
		{"negative offset", []SGE{ok}, -1, 4, 0, ErrLength, 0, ErrLength},
		{"offset past end", []SGE{ok}, 17, 0, 0, ErrLength, 0, ErrLength},
		{"offset at end", []SGE{ok}, 16, 0, 0, nil, 0, nil},
		{"empty SGL", nil, 0, 0, 0, nil, 0, nil},
		{"empty SGL, offset", nil, 1, 0, 0, ErrLength, 0, ErrLength},
		{"src too long", []SGE{ok}, 10, 7, 6, nil, 0, ErrLength},
		{"bad lkey after good", []SGE{ok, {0, 8, 0x12345}}, 0, 24, 16, ErrBadKey, 16, ErrBadKey},
		{"bad lkey skipped by offset", []SGE{{0, 8, 0x12345}, ok}, 8, 16, 16, nil, 16, nil},
		{"bad lkey past the copy", []SGE{ok, {0, 8, 0x12345}}, 0, 16, 16, nil, 16, nil},
		{"zero-length bad SGE", []SGE{{0, 0, 0}, ok, {99, 0, 1}}, 0, 16, 16, nil, 16, nil},
		{"rkey as lkey", []SGE{{0, 8, rw.RKey()}}, 0, 8, 0, ErrBadKey, 0, ErrBadKey},
		{"SGE out of bounds", []SGE{{60, 8, rw.LKey()}}, 0, 2, 0, ErrBounds, 0, ErrBounds},
		// The whole SGE is checked, not only the bytes copied.
		{"SGE out of bounds past offset", []SGE{{60, 8, rw.LKey()}}, 1, 2, 0, ErrBounds, 0, ErrBounds},
		{"read-only region", []SGE{{0x100, 8, ro.LKey()}}, 0, 8, 8, nil, 0, ErrAccess},
	} {
		n, err := tb.Gather(dst[:tc.n], tc.sgl, tc.off)
		if err != tc.gather || n != tc.gatherN {
			t.Errorf("%s: Gather = %d, %v; want %d, %v", tc.name, n, err, tc.gatherN, tc.gather)
		}
		n, err = tb.Scatter(tc.sgl, tc.off, dst[:tc.n])
		if err != tc.scatter || n != tc.scatN {
			t.Errorf("%s: Scatter = %d, %v; want %d, %v", tc.name, n, err, tc.scatN, tc.scatter)
		}
	}
}

// ErrLength must come before any byte is written.
func TestScatterTooLongWritesNothing(t *testing.T) {
	tb := NewTable(1)
	buf := make([]byte, 16)
	r := mustRegisterAt(t, tb, buf, 0, LocalWrite)
	if _, err := tb.Scatter([]SGE{{0, 16, r.LKey()}}, 4, bytes.Repeat([]byte{1}, 13)); err != ErrLength {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(buf, make([]byte, 16)) {
		t.Errorf("buffer written: %x", buf)
	}
}

func TestSGLLen(t *testing.T) {
	maxLen := uint32(math.MaxUint32)
	for _, tc := range []struct {
		sgl  []SGE
		want int
	}{
		{nil, 0},
		{[]SGE{{Length: 0}}, 0},
		{[]SGE{{Length: 3}, {Length: 0}, {Length: 4}}, 7},
		{[]SGE{{Length: maxLen}, {Length: maxLen}}, 2 * int(maxLen)},
	} {
		if got := SGLLen(tc.sgl); got != tc.want {
			t.Errorf("SGLLen(%v) = %d, want %d", tc.sgl, got, tc.want)
		}
	}
}

func ExampleTable_Scatter() {
	tb := NewTable(16)
	a, _ := tb.RegisterAt(make([]byte, 4), 0, LocalWrite)
	b, _ := tb.RegisterAt(make([]byte, 4), 0, LocalWrite)
	sgl := []SGE{{Addr: 0, Length: 4, LKey: a.LKey()}, {Addr: 0, Length: 4, LKey: b.LKey()}}
	n, err := tb.Scatter(sgl, 2, []byte("hello"))
	fmt.Println(n, err, string(a.Bytes()[2:]), string(b.Bytes()[:3]))
	// Output: 5 <nil> he llo
}
