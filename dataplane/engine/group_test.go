package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// lane is one queue pair's traffic in TestGroupRunEach: driven by the hook
// of the node that owns the requester, on that node's goroutine.
type lane struct {
	qa, qb   *rc.QP
	cqa, cqb *verbs.CQ
	src, dst *mr.Region
	wr       verbs.SendWR
	sgl      [1]mr.SGE
	cs       []verbs.Completion
	posted   int
	done     int
	target   int
	window   int
	size     int
}

func (l *lane) hook() (bool, error) {
	did := false
	for l.posted < l.target && l.posted-l.done < l.window {
		// Each write carries its sequence number in its first bytes and
		// goes to its own slot of the destination.
		slot := l.posted % l.window
		copy(l.src.Bytes()[slot*l.size:], fmt.Appendf(nil, "%08d", l.posted))
		l.sgl[0] = transporttest.SGE(l.src, slot*l.size, l.size)
		l.wr.RemoteAddr = l.dst.Addr() + uint64(slot*l.size)
		if err := l.qa.PostSend(&l.wr); err != nil {
			return false, err
		}
		l.posted++
		did = true
	}
	n := l.cqa.Poll(l.cs)
	for _, c := range l.cs[:n] {
		if c.Status != verbs.Success {
			return false, fmt.Errorf("QP %d: write %d completed with %v", c.QPN, l.done, c.Status)
		}
		// Writes complete in order: the slot of the oldest holds it now.
		slot := l.done % l.window
		want := fmt.Appendf(nil, "%08d", l.done)
		if got := l.dst.Bytes()[slot*l.size : slot*l.size+8]; !bytes.Equal(got, want) {
			return false, fmt.Errorf("QP %d: write %d placed %q", c.QPN, l.done, got)
		}
		l.done++
	}
	return did || n > 0, nil
}

// TestGroupRunEach runs two devices of four queues each, every node on a
// goroutine of its own (RunEach), with four connections whose ends sit on
// different nodes: every frame is handed over between goroutines through
// the lock-free rings, and every write lands, checked, in order.
func TestGroupRunEach(t *testing.T) {
	const queues, perLane, window, size = 4, 3000, 16, 256
	p := transporttest.NewGroupPair(memlink.Config{Capacity: 4096}, queues)
	lanes := make([]*lane, queues)
	for i := range lanes {
		l := &lane{cqa: verbs.NewCQ(1024), cqb: verbs.NewCQ(1024), cs: make([]verbs.Completion, 64), target: perLane, window: window, size: size}
		var err error
		// Eight busy-polling threads share the test host's cores (two in
		// CI, beside other packages' tests): a node can wait tens of
		// milliseconds for a core, so the default 4 ms timeout with 7
		// retries fails a connection that is only starved, not broken.
		// 268 ms per try keeps the retransmit path in play but bounded.
		l.qa, l.qb, err = p.ConnectRC(transporttest.RCOptions{NodeA: i, NodeB: (i + 1) % queues, CQA: l.cqa, CQB: l.cqb, SQDepth: 64, Timeout: 16})
		if err != nil {
			t.Fatal(err)
		}
		if l.src, err = p.A.Buffer(window*size, mr.LocalWrite); err != nil {
			t.Fatal(err)
		}
		if l.dst, err = p.B.Buffer(window*size, mr.LocalWrite|mr.RemoteWrite); err != nil {
			t.Fatal(err)
		}
		l.wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: l.sgl[:], RKey: l.dst.RKey()}
		lanes[i] = l
	}
	var finished atomic.Int32
	hooksA := make([]func() (bool, error), queues)
	for i, l := range lanes {
		reported := false
		hooksA[i] = func() (bool, error) {
			did, err := l.hook()
			if err == nil && l.done == l.target && !reported {
				reported = true
				finished.Add(1)
			}
			return did, err
		}
	}
	errDone := errors.New("done")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) }
	errB := make(chan error, 1)
	bctx, bcancel := context.WithCancel(ctx)
	go func() { errB <- p.B.Group.RunEach(bctx, clock, nil, nil) }()
	// Node 0 of A ends the run once every lane is through.
	hooksA[0] = func(h func() (bool, error)) func() (bool, error) {
		return func() (bool, error) {
			did, err := h()
			if err == nil && finished.Load() == queues {
				return did, errDone
			}
			return did, err
		}
	}(hooksA[0])
	err := p.A.Group.RunEach(ctx, clock, hooksA, nil)
	bcancel()
	if eb := <-errB; !errors.Is(eb, context.Canceled) {
		t.Errorf("B's run: %v", eb)
	}
	if !errors.Is(err, errDone) {
		for i, l := range lanes {
			t.Logf("lane %d: posted %d done %d; A %+v; B %+v", i, l.posted, l.done, l.qa.Stats(), l.qb.Stats())
		}
		t.Fatalf("A's run: %v", err)
	}
	for _, h := range []*transporttest.Host{p.A, p.B} {
		var off, in uint64
		for i := range queues {
			st := h.Group.Node(i).Stats()
			off, in = off+st.HandedOff, in+st.HandedIn
			if st.HandoffDrops != 0 {
				t.Logf("node %d dropped %d frames on full handoff rings (recovered by the transport)", i, st.HandoffDrops)
			}
		}
		if off == 0 || in == 0 {
			t.Fatalf("handed off %d, in %d: every frame should have crossed nodes", off, in)
		}
	}
	t.Logf("%d writes of %d B over %d node pairs in %v", queues*perLane, size, queues, time.Since(start))
}

// TestGroupSteadyStateNoAllocs: handing frames over between nodes
// allocates nothing.
func TestGroupSteadyStateNoAllocs(t *testing.T) {
	s := newGroupStream(t, verbs.OpWrite, 1024, 1024, 64)
	s.Run(t, 2000)
	if a := testing.AllocsPerRun(20, func() { s.Run(t, 100) }); a != 0 {
		t.Fatalf("%.1f allocations per 100 writes through handoff rings", a)
	}
	st := s.P.B.Group.Node(0).Stats()
	if st.HandedOff == 0 {
		t.Fatalf("nothing handed off: %+v", st)
	}
}

// newGroupStream is newStream between two groups of two nodes, with the
// queue pairs on node 0 at A and node 1 at B.
func newGroupStream(tb testing.TB, op verbs.Opcode, size, mtu, window int) *transporttest.Stream {
	return transporttest.NewStream(tb, transporttest.NewGroupPair(memlink.Config{Capacity: 1 << 14}, 2), transporttest.RCOptions{NodeB: 1}, op, size, mtu, window)
}

// BenchmarkWrite64Handoff is BenchmarkWrite64 with every frame received by
// a node that does not own its queue pair: the handoff's cost per packet.
func BenchmarkWrite64Handoff(b *testing.B) {
	newGroupStream(b, verbs.OpWrite, 64, 1024, 128).Bench(b, 64)
}
