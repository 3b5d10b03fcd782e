package engine_test

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// newStream is a Stream over a lossless memlink pair.
func newStream(tb testing.TB, op verbs.Opcode, size, mtu, window int) *transporttest.Stream {
	return transporttest.NewStream(tb, transporttest.NewPair(memlink.Config{Capacity: 1 << 14}), transporttest.RCOptions{}, op, size, mtu, window)
}

func benchStream(b *testing.B, op verbs.Opcode, size, mtu int) {
	newStream(b, op, size, mtu, 128).Bench(b, size)
}

// Benchmarks of the whole transport over a lossless in-memory link: both
// ends, one goroutine. ns/pkt divides the time by every frame either side
// sent (requests, responses and ACKs), each built, copied through the
// link, parsed, ICRC-checked and executed.
func BenchmarkSend64(b *testing.B)     { benchStream(b, verbs.OpSend, 64, 1024) }
func BenchmarkWrite64(b *testing.B)    { benchStream(b, verbs.OpWrite, 64, 1024) }
func BenchmarkWrite4K(b *testing.B)    { benchStream(b, verbs.OpWrite, 4096, 4096) }
func BenchmarkWrite64K(b *testing.B)   { benchStream(b, verbs.OpWrite, 64<<10, 4096) }
func BenchmarkRead64(b *testing.B)     { benchStream(b, verbs.OpRead, 64, 1024) }
func BenchmarkFetchAdd(b *testing.B)   { benchStream(b, verbs.OpFetchAdd, 8, 1024) }
func BenchmarkWrite64K1K(b *testing.B) { benchStream(b, verbs.OpWrite, 64<<10, 1024) }

// TestSteadyStateNoAllocs: the transport's hot path — posting, sending,
// receiving, acknowledging and completing — allocates nothing.
func TestSteadyStateNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		op   verbs.Opcode
		size int
	}{
		{verbs.OpSend, 64}, {verbs.OpSendImm, 3000}, {verbs.OpWrite, 64 << 10}, {verbs.OpWriteImm, 100},
		{verbs.OpRead, 64}, {verbs.OpRead, 10000}, {verbs.OpCmpSwap, 8}, {verbs.OpFetchAdd, 8},
	} {
		s := newStream(t, tc.op, tc.size, 1024, 64)
		s.Run(t, 2000)
		if a := testing.AllocsPerRun(20, func() { s.Run(t, 100) }); a != 0 {
			t.Errorf("%v %d B: %.1f allocations per 100 requests", tc.op, tc.size, a)
		}
	}
}

// BenchmarkWrite64ManyIdle is BenchmarkWrite64 with 4000 more connected
// but idle queue pairs on each node: the engine's passes visit only the
// busy one, so the cost per packet should not move.
func BenchmarkWrite64ManyIdle(b *testing.B) {
	s := newStream(b, verbs.OpWrite, 64, 1024, 128)
	for i := 0; i < 4000; i++ {
		if _, _, err := s.P.ConnectRC(transporttest.RCOptions{ARQ: verbs.NewRecvQueue(1), BRQ: verbs.NewRecvQueue(1), SQDepth: 1}); err != nil {
			b.Fatal(err)
		}
	}
	s.Run(b, 1000)
	p0 := s.Packets()
	b.ReportAllocs()
	b.ResetTimer()
	s.Run(b, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(s.Packets()-p0), "ns/pkt")
}
