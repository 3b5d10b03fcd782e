package fabric

import (
	"context"
	"testing"
)

func benchCQ(b *testing.B, th Threading) *CQ {
	infos, err := GetInfo(context.Background(), &Hints{Provider: ProviderMem, Node: "198.19.250.1",
		Domain: DomainAttr{Threading: th, Progress: ProgressAuto}})
	if err != nil {
		b.Fatal(err)
	}
	f, _ := OpenFabric(&infos[0])
	d, err := f.Domain(&infos[0])
	if err != nil {
		b.Fatal(err)
	}
	q, err := d.CQ(64)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close(); d.Close(); f.Close() })
	return q
}

// BenchmarkCQRead16 is the cost of reading completions in batches of 16
// (the goal: at most 50 ns per completion); ns/op is per completion.
func BenchmarkCQRead16(b *testing.B) {
	for _, th := range []Threading{ThreadSafe, ThreadDomain} {
		b.Run(th.String(), func(b *testing.B) {
			q := benchCQ(b, th)
			var c Completion
			out := make([]Completion, 16)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 16 {
				for j := 0; j < 16; j++ {
					c.Context = uint64(i + j)
					q.push(0, &c)
				}
				if q.Read(out) != 16 {
					b.Fatal("short read")
				}
			}
		})
	}
}
