package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/handoff"
	"github.com/softfabric/softfabric/dataplane/link"
)

// A Group is the nodes of one device: one node per receive queue, each on
// the link of its queue (an AF_XDP socket), each owning a set of queue
// pairs and transmitting their frames on its own queue. A frame that
// arrives on a queue whose node does not own its queue pair is copied to
// the owner through a handoff ring (one per ordered pair of nodes: a single
// producer and a single consumer, no lock, no channel), counted on both
// sides, and delivered on the owner's next pass.
//
// The nodes of a group run either each on a goroutine of its own (RunEach:
// a worker per queue, the way a device scales over cores) or all on one
// goroutine (Poll, Run: manual progress for a single-threaded application).
//
// Attach and Detach run while no goroutine drives the owning node, or on
// that goroutine (in its hook).
type Group struct {
	nodes []*Node
	// owner maps a QPN to its node's index + 1 (0: none). Nodes read it
	// only for frames whose queue pair they do not own themselves.
	owner   []atomic.Uint32
	sleeper Sleeper
	pace    Backoff // copied by each run loop
}

// Sleeper is where an idle node blocks: until its link has frames,
// another node of its group hands it some (and calls Wake), or the timeout
// passes. The device provides it (poll(2) on the AF_XDP socket and an
// eventfd), so that the engine stays free of system calls.
type Sleeper interface {
	Sleep(timeout time.Duration) error
	Wake()
}

// DefaultHandoffRing is the number of frames a handoff ring holds.
const DefaultHandoffRing = 256

// NewGroup returns a group with a node on each link and handoff rings of
// ringSize frames (0: DefaultHandoffRing) between every two of them.
func NewGroup(links []link.Link, ringSize int) *Group {
	if ringSize <= 0 {
		ringSize = DefaultHandoffRing
	}
	g := &Group{owner: make([]atomic.Uint32, MaxQPN)}
	maxFrame := 0
	for i, l := range links {
		n := New(l)
		n.group, n.id = g, i
		n.out = make([]*handoff.Ring, len(links))
		n.touched = make([]bool, len(links))
		g.nodes = append(g.nodes, n)
		if maxFrame == 0 || l.MaxFrame() < maxFrame {
			maxFrame = l.MaxFrame()
		}
	}
	for from, src := range g.nodes {
		for to, dst := range g.nodes {
			if from == to {
				continue
			}
			r := handoff.New(ringSize, maxFrame)
			src.out[to] = r
			dst.in = append(dst.in, r)
		}
	}
	return g
}

// Len is the number of nodes.
func (g *Group) Len() int { return len(g.nodes) }

// Node returns node i.
func (g *Group) Node(i int) *Node { return g.nodes[i] }

// Attach registers q with node i, which will own it.
func (g *Group) Attach(i int, q QP) error {
	if i < 0 || i >= len(g.nodes) {
		return fmt.Errorf("engine: node %d of %d", i, len(g.nodes))
	}
	if err := g.nodes[i].Attach(q); err != nil {
		return err
	}
	g.owner[q.QPN()].Store(uint32(i + 1))
	return nil
}

// Detach removes q from the node that owns it.
func (g *Group) Detach(q QP) {
	qpn := q.QPN()
	if qpn >= MaxQPN {
		return
	}
	if o := g.owner[qpn].Load(); o != 0 {
		g.owner[qpn].Store(0)
		g.nodes[o-1].Detach(q)
	}
}

// Owner returns the index of the node that owns QPN qpn, or -1.
func (g *Group) Owner(qpn uint32) int {
	if qpn >= MaxQPN {
		return -1
	}
	return int(g.owner[qpn].Load()) - 1
}

// Poll runs one pass of every node, in turn, on the calling goroutine.
func (g *Group) Poll(now int64) (bool, error) {
	did := false
	for _, n := range g.nodes {
		d, err := n.Poll(now)
		if err != nil {
			return did, err
		}
		did = did || d
	}
	return did, nil
}

// NextDeadline is the earliest timer of any node, 0 if none runs.
func (g *Group) NextDeadline() int64 {
	var d int64
	for _, n := range g.nodes {
		if t := n.NextDeadline(); t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

// SetPace sets how Run and RunEach back off when idle: how long they
// spin and yield before sleeping (Backoff's fields; zero: its defaults).
// Nodes that share their cores with other polling threads (an attached
// application beside its daemon) do better sleeping sooner.
func (g *Group) SetPace(b Backoff) { g.pace = b }

// SetSleeper installs what Run blocks on when every node is idle: it must
// return when any node's link has frames.
func (g *Group) SetSleeper(s Sleeper) { g.sleeper = s }

// Run drives every node on the calling goroutine, as Node.Run drives one.
// setup, if not nil, runs first on the locked thread, as in RunEach.
func (g *Group) Run(ctx context.Context, clock func() int64, hook func() (bool, error), setup func() error) error {
	if len(g.nodes) == 1 {
		return runLoop(ctx, clock, hook, setup, g.nodes[0].Poll, g.nodes[0].idle, g.pace)
	}
	return runLoop(ctx, clock, hook, setup, g.Poll, g.idle, g.pace)
}

func (g *Group) idle(b *Backoff, now int64) {
	if g.sleeper == nil || !b.Sleeping() {
		b.Idle(now, g.NextDeadline())
		return
	}
	b.idle++
	_ = g.sleeper.Sleep(sleepTimeout(now, g.NextDeadline()))
}

// RunEach drives each node on a goroutine of its own, each locked to its
// OS thread, until ctx ends or a node's hook or link fails; then it stops
// them all and returns the first error (ctx's when none failed). hooks[i]
// (nil: none) runs between node i's passes, on its goroutine: where the
// application posts to and reaps from the queue pairs node i owns. setup,
// if not nil, runs first on each node's thread (to pin it to a CPU); a
// thread it ran on is never given back to the Go scheduler.
func (g *Group) RunEach(ctx context.Context, clock func() int64, hooks []func() (bool, error), setup func(i int) error) error {
	if len(hooks) != 0 && len(hooks) != len(g.nodes) {
		return fmt.Errorf("engine: %d hooks for %d nodes", len(hooks), len(g.nodes))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Wake sleeping nodes when the run ends, rather than letting each
	// finish its sleep.
	stop := context.AfterFunc(ctx, func() {
		for _, n := range g.nodes {
			if n.sleeper != nil {
				n.sleeper.Wake()
			}
		}
	})
	defer stop()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, n := range g.nodes {
		var hook func() (bool, error)
		if len(hooks) != 0 {
			hook = hooks[i]
		}
		var pin func() error
		if setup != nil {
			pin = func() error { return setup(i) }
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runLoop(ctx, clock, hook, pin, n.Poll, n.idle, g.pace)
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			cancel() // one node stopping stops them all
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// handOff copies a frame whose queue pair node o owns into the ring
// towards it; one whose payload, from byte at, its link placed (placed
// non-nil) goes with the place of its payload, which is not copied.
func (n *Node) handOff(o int, frame []byte, at int, placed []byte) {
	ok := false
	if placed != nil {
		ok = n.out[o].PushPlaced(frame, at, placed)
	} else {
		ok = n.out[o].Push(frame)
	}
	if ok {
		n.stats.HandedOff++
		n.touched[o] = true
	} else {
		n.stats.HandoffDrops++
	}
}

// publish makes the frames handed off in this pass visible to their
// owners, waking those that sleep.
func (n *Node) publish() {
	for o, t := range n.touched {
		if !t {
			continue
		}
		n.touched[o] = false
		if n.out[o].Publish() {
			dst := n.group.nodes[o]
			if dst.sleeper != nil && dst.sleeping.Load() {
				dst.sleeper.Wake()
			}
		}
	}
}

// receiveHandedIn delivers the frames other nodes handed to this one.
func (n *Node) receiveHandedIn(now int64) int {
	got := 0
	for _, r := range n.in {
		k := r.Peek(n.views)
		for i, f := range n.views[:k] {
			n.deliver(f, r.Placed(i), now, false)
		}
		r.Release()
		n.stats.HandedIn += uint64(k)
		got += k
	}
	return got
}

// handedInWaiting reports whether another node has published frames for
// this one.
func (n *Node) handedInWaiting() bool {
	for _, r := range n.in {
		if r.Len() > 0 {
			return true
		}
	}
	return false
}
