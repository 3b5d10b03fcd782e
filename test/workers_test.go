package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// workerLane is one connection of TestWorkersPerQueue: a queue pair on
// worker w of A writing to one on worker peer of B, every write to its own
// offset, driven by the hook of A's worker w on that worker's goroutine.
type workerLane struct {
	qa, qb   *rc.QP
	cq       *verbs.CQ
	src, dst *mr.Region
	wr       verbs.SendWR
	sgl      [1]mr.SGE
	cs       [64]verbs.Completion
	posted   int
	done     int
}

const (
	laneWrites = 2000
	laneSize   = 512
	laneWindow = 32
)

func (l *workerLane) hook() (bool, error) {
	did := false
	for l.posted < laneWrites && l.posted-l.done < laneWindow {
		off := l.posted * laneSize
		l.sgl[0] = mr.SGE{Addr: l.src.Addr() + uint64(off), Length: laneSize, LKey: l.src.LKey()}
		l.wr.RemoteAddr = l.dst.Addr() + uint64(off)
		if err := l.qa.PostSend(&l.wr); err != nil {
			return false, err
		}
		l.posted++
		did = true
	}
	n := l.cq.Poll(l.cs[:])
	for _, c := range l.cs[:n] {
		if c.Status != verbs.Success {
			return false, fmt.Errorf("QP %d: write %d completed with %v", c.QPN, l.done, c.Status)
		}
		l.done++
	}
	return did || n > 0, nil
}

// TestWorkersPerQueue: on a veth with four queues, each device runs a
// worker per queue on a goroutine of its own, and four connections, one
// per worker, carry checked RDMA writes. Placed on the same worker index at
// both ends, each connection's frames stay on one queue (XDP native on
// veth: transmit queue i feeds the peer's receive queue i) and every
// worker serves its own; placed on different workers, every frame crosses
// between workers through the handoff rings, on the real kernel path.
func TestWorkersPerQueue(t *testing.T) {
	const queues = 4
	p := setup(t, netnstest.Options{Queues: queues}, false)
	up(t, p.A, p.B)
	a, b := open(t, p.A), open(t, p.B)
	if a.d.Workers() != queues || b.d.Workers() != queues {
		t.Fatalf("workers %d and %d, want %d each", a.d.Workers(), b.d.Workers(), queues)
	}
	for _, shift := range []int{0, 1} {
		t.Run(map[int]string{0: "aligned", 1: "crossed"}[shift], func(t *testing.T) {
			before := [2][]uint64{handedIn(b.d), handedIn(a.d)}
			rxBefore := rxFrames(b.d)
			lanes := make([]*workerLane, queues)
			for w := range lanes {
				lanes[w] = newWorkerLane(t, a, b, w, (w+shift)%queues)
			}
			hooks := make([]func() (bool, error), queues)
			var finished atomic.Int32
			errDone := errors.New("all lanes done")
			for w, l := range lanes {
				counted := false
				hooks[w] = func() (bool, error) {
					did, err := l.hook()
					if err != nil {
						return did, err
					}
					if l.done == laneWrites && !counted {
						counted = true
						finished.Add(1)
					}
					if finished.Load() == queues {
						return did, errDone
					}
					return did, nil
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			bctx, bstop := context.WithCancel(ctx)
			errB := make(chan error, 1)
			go func() { errB <- b.d.RunWorkers(bctx, nil) }()
			err := a.d.RunWorkers(ctx, hooks)
			bstop()
			if eb := <-errB; !errors.Is(eb, context.Canceled) {
				t.Errorf("B's workers: %v", eb)
			}
			if !errors.Is(err, errDone) {
				for w, l := range lanes {
					t.Logf("lane %d: posted %d done %d, A %+v, B %+v", w, l.posted, l.done, l.qa.Stats(), l.qb.Stats())
				}
				t.Fatalf("A's workers: %v", err)
			}
			for w, l := range lanes {
				if !bytes.Equal(l.src.Bytes(), l.dst.Bytes()) {
					t.Fatalf("lane %d: data at B differs from what A wrote", w)
				}
				a.d.Destroy(l.qa)
				b.d.Destroy(l.qb)
			}
			rx := rxFrames(b.d)
			in := [2][]uint64{handedIn(b.d), handedIn(a.d)}
			for w := range queues {
				if rx[w] == rxBefore[w] {
					t.Errorf("B's worker %d received nothing from its queue: %v", w, b.d.WorkerStats())
				}
				for side := range 2 {
					got := in[side][w] - before[side][w]
					if shift == 0 && got != 0 {
						t.Errorf("aligned: worker %d of %s was handed %d frames", w, "BA"[side:side+1], got)
					}
					if shift == 1 && got == 0 {
						t.Errorf("crossed: worker %d of %s was handed nothing", w, "BA"[side:side+1])
					}
				}
			}
			t.Logf("A: %+v", a.d.WorkerStats())
			t.Logf("B: %+v", b.d.WorkerStats())
		})
	}
}

func newWorkerLane(t *testing.T, a, b *end, wa, wb int) *workerLane {
	t.Helper()
	l := &workerLane{cq: verbs.NewCQ(256)}
	var err error
	if l.src, err = a.d.MRs().Register(make([]byte, laneWrites*laneSize), mr.LocalWrite); err != nil {
		t.Fatal(err)
	}
	if l.dst, err = b.d.MRs().Register(make([]byte, laneWrites*laneSize), mr.LocalWrite|mr.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(wa), uint64(wb)))
	for i := range l.src.Bytes() {
		l.src.Bytes()[i] = byte(r.Uint32())
	}
	ea := &end{h: a.h, d: a.d, scq: l.cq, rcq: l.cq}
	eb := &end{h: b.h, d: b.d, scq: verbs.NewCQ(16), rcq: verbs.NewCQ(16)}
	l.qa, l.qb = rcPairOn(t, ea, eb, verbs.NewRecvQueue(1), verbs.NewRecvQueue(1), wa, wb)
	l.wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: l.sgl[:], RKey: l.dst.RKey()}
	return l
}

func rxFrames(d *device.Device) []uint64 {
	var out []uint64
	for _, s := range d.WorkerStats() {
		out = append(out, s.RxFrames)
	}
	return out
}

func handedIn(d *device.Device) []uint64 {
	var out []uint64
	for _, s := range d.WorkerStats() {
		out = append(out, s.HandedIn)
	}
	return out
}
