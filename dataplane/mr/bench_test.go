package mr

import (
	"fmt"
	"testing"
)

func BenchmarkRemote(b *testing.B) {
	for _, size := range []uint32{64, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			tb := NewTable(1024)
			r := mustRegisterAt(b, tb, make([]byte, 1<<20), 0, accessAll)
			rkey := r.RKey()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				addr := uint64(i*4096) & (1<<20 - 1)
				if _, err := tb.Remote(rkey, addr, size, RemoteWrite); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAtomic64(b *testing.B) {
	tb := NewTable(1024)
	r := mustRegisterAt(b, tb, make([]byte, 4096), 0, accessAll)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.Atomic64(r.RKey(), 64); err != nil {
			b.Fatal(err)
		}
	}
}

// sgeBench is a payload landing in a receive buffer split into nsge equal
// SGEs, each in its own region, at a message offset past the first SGE so the
// skip is measured too.
func sgeBench(b *testing.B, size, nsge int, f func(tb *Table, sgl []SGE, off int, p []byte) (int, error)) {
	b.Run(fmt.Sprintf("%dB/%dsge", size, nsge), func(b *testing.B) {
		tb := NewTable(1024)
		per := 2 * size / nsge
		var sgl []SGE
		for range nsge {
			r := mustRegisterAt(b, tb, make([]byte, per), 0, LocalWrite)
			sgl = append(sgl, SGE{Addr: 0, Length: uint32(per), LKey: r.LKey()})
		}
		p := make([]byte, size)
		off := per / 2
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			if n, err := f(tb, sgl, off, p); err != nil || n != size {
				b.Fatal(n, err)
			}
		}
	})
}

func BenchmarkScatter(b *testing.B) {
	for _, size := range []int{64, 4096} {
		for _, nsge := range []int{1, 4} {
			sgeBench(b, size, nsge, func(tb *Table, sgl []SGE, off int, p []byte) (int, error) {
				return tb.Scatter(sgl, off, p)
			})
		}
	}
}

func BenchmarkGather(b *testing.B) {
	for _, size := range []int{64, 4096} {
		for _, nsge := range []int{1, 4} {
			sgeBench(b, size, nsge, func(tb *Table, sgl []SGE, off int, p []byte) (int, error) {
				return tb.Gather(p, sgl, off)
			})
		}
	}
}
