package transporttest

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// Stream keeps a window of requests of one kind in flight between two
// connected RC queue pairs, reposting as they complete: the steady state
// of a bandwidth test, for benchmarks and allocation tests of the
// transport over any pair of links.
type Stream struct {
	P       *Pair
	QA, QB  *rc.QP
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

// NewStream connects a queue pair on each host of p (placed as o says) and
// prepares requests of op carrying size bytes, window of them in flight.
func NewStream(tb testing.TB, p *Pair, o RCOptions, op verbs.Opcode, size, mtu, window int) *Stream {
	o.MTU, o.SQDepth, o.ARQ, o.BRQ = mtu, 1024, verbs.NewRecvQueue(1024), verbs.NewRecvQueue(1024)
	qa, qb, err := p.ConnectRC(o)
	if err != nil {
		tb.Fatal(err)
	}
	la, err := p.A.Buffer(max(size, 8), mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic|mr.LocalWrite)
	if err != nil {
		tb.Fatal(err)
	}
	rb, err := p.B.Buffer(max(size, 8), mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic|mr.LocalWrite)
	if err != nil {
		tb.Fatal(err)
	}
	s := &Stream{P: p, QA: qa, QB: qb, window: window, cs: make([]verbs.Completion, 256)}
	s.sgl[0] = SGE(la, 0, size)
	s.rsgl[0] = SGE(rb, 0, size)
	s.wr = verbs.SendWR{Op: op, Flags: verbs.Signaled, SGL: s.sgl[:], RemoteAddr: rb.Addr(), RKey: rb.RKey(), CompareAdd: 1}
	s.recv = verbs.RecvWR{SGL: s.rsgl[:]}
	s.needRcv = op.IsSend() || op == verbs.OpWriteImm
	return s
}

// Run completes n more requests.
func (s *Stream) Run(tb testing.TB, n int) {
	target := s.done + n
	for s.done < target {
		for s.out < s.window && s.done+s.out < target {
			if s.needRcv {
				if err := s.QB.PostRecv(&s.recv); err != nil {
					tb.Fatal(err)
				}
			}
			if err := s.QA.PostSend(&s.wr); err != nil {
				tb.Fatal(err)
			}
			s.out++
		}
		if !s.P.Step() {
			tb.Fatal("stream stalled")
		}
		k := s.P.A.SendCQ.Poll(s.cs)
		for i := 0; i < k; i++ {
			if s.cs[i].Status != verbs.Success {
				tb.Fatalf("completion %+v", s.cs[i])
			}
		}
		s.out -= k
		s.done += k
		s.P.B.RecvCQ.Poll(s.cs)
	}
}

// Packets is the number of frames both hosts have sent.
func (s *Stream) Packets() uint64 {
	var n uint64
	for _, h := range []*Host{s.P.A, s.P.B} {
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

// Bench runs b.N requests of s after a warm-up and reports, besides the
// time per request, ns/pkt (the time divided by every frame either side
// sent: requests, responses and ACKs) and pkts/op.
func (s *Stream) Bench(b *testing.B, size int) {
	s.Run(b, 1000) // warm up: buffers, queues
	p0 := s.Packets()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	s.Run(b, b.N)
	b.StopTimer()
	pk := s.Packets() - p0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pk), "ns/pkt")
	b.ReportMetric(float64(pk)/float64(b.N), "pkts/op")
}
