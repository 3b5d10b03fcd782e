package engine_test

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// stream keeps a window of requests of one kind in flight on a lossless
// link, reposting as they complete: the steady state of a bandwidth test.
type stream struct {
	p       *transporttest.Pair
	qa, qb  *rc.QP
	wr      verbs.SendWR
	recv    verbs.RecvWR
	sgl     [1]mr.SGE
	rsgl    [1]mr.SGE
	cs      []verbs.Completion
	window  int
	out     int
	done    int
	needRcv bool
}

func newStream(tb testing.TB, op verbs.Opcode, size, mtu, window int) *stream {
	return newStreamOn(tb, transporttest.NewPair(memlink.Config{Capacity: 1 << 14}), transporttest.RCOptions{}, op, size, mtu, window)
}

// newStreamOn is newStream on pair p, with the queue pairs placed as o
// says.
func newStreamOn(tb testing.TB, p *transporttest.Pair, o transporttest.RCOptions, op verbs.Opcode, size, mtu, window int) *stream {
	o.MTU, o.SQDepth, o.ARQ, o.BRQ = mtu, 1024, verbs.NewRecvQueue(1024), verbs.NewRecvQueue(1024)
	qa, qb, err := p.ConnectRC(o)
	if err != nil {
		tb.Fatal(err)
	}
	la, err := p.A.Buffer(max(size, 8), all)
	if err != nil {
		tb.Fatal(err)
	}
	rb, err := p.B.Buffer(max(size, 8), all)
	if err != nil {
		tb.Fatal(err)
	}
	s := &stream{p: p, qa: qa, qb: qb, window: window, cs: make([]verbs.Completion, 256)}
	s.sgl[0] = transporttest.SGE(la, 0, size)
	s.rsgl[0] = transporttest.SGE(rb, 0, size)
	s.wr = verbs.SendWR{Op: op, Flags: verbs.Signaled, SGL: s.sgl[:], RemoteAddr: rb.Addr(), RKey: rb.RKey(), CompareAdd: 1}
	s.recv = verbs.RecvWR{SGL: s.rsgl[:]}
	s.needRcv = op.IsSend() || op == verbs.OpWriteImm
	return s
}

// run completes n requests.
func (s *stream) run(tb testing.TB, n int) {
	target := s.done + n
	for s.done < target {
		for s.out < s.window && s.done+s.out < target {
			if s.needRcv {
				if err := s.qb.PostRecv(&s.recv); err != nil {
					tb.Fatal(err)
				}
			}
			if err := s.qa.PostSend(&s.wr); err != nil {
				tb.Fatal(err)
			}
			s.out++
		}
		if !s.p.Step() {
			tb.Fatal("stream stalled")
		}
		k := s.p.A.SendCQ.Poll(s.cs)
		for i := 0; i < k; i++ {
			if s.cs[i].Status != verbs.Success {
				tb.Fatalf("completion %+v", s.cs[i])
			}
		}
		s.out -= k
		s.done += k
		s.p.B.RecvCQ.Poll(s.cs)
	}
}

func (s *stream) packets() uint64 {
	var n uint64
	for _, h := range []*transporttest.Host{s.p.A, s.p.B} {
		if h.Group == nil {
			n += h.Node.Stats().TxFrames
			continue
		}
		for i := range h.Group.Len() {
			n += h.Group.Node(i).Stats().TxFrames
		}
	}
	return n
}

func benchStream(b *testing.B, op verbs.Opcode, size, mtu int) {
	benchStreamOn(b, newStream(b, op, size, mtu, 128), size)
}

func benchStreamOn(b *testing.B, s *stream, size int) {
	s.run(b, 1000) // warm up: buffers, queues
	p0 := s.packets()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	s.run(b, b.N)
	b.StopTimer()
	pk := s.packets() - p0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pk), "ns/pkt")
	b.ReportMetric(float64(pk)/float64(b.N), "pkts/op")
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
		s.run(t, 2000)
		if a := testing.AllocsPerRun(20, func() { s.run(t, 100) }); a != 0 {
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
		if _, _, err := s.p.ConnectRC(transporttest.RCOptions{ARQ: verbs.NewRecvQueue(1), BRQ: verbs.NewRecvQueue(1), SQDepth: 1}); err != nil {
			b.Fatal(err)
		}
	}
	s.run(b, 1000)
	p0 := s.packets()
	b.ReportAllocs()
	b.ResetTimer()
	s.run(b, b.N)
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(s.packets()-p0), "ns/pkt")
}
