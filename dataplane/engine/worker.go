package engine

import (
	"context"
	"runtime"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
)

// Backoff paces a polling loop: it spins while polls find work and backs
// off step by step when they do not, so that a busy device never sleeps
// and an idle one costs next to no CPU. A sleep never runs past the next
// timer deadline.
type Backoff struct {
	// Spin is how many empty polls run back to back before yielding
	// (default 512); Yield how many more yield the processor before
	// sleeping (default 512).
	Spin, Yield int
	// MaxSleep bounds one sleep (default 1 ms): the latency an idle
	// device adds to the first packet that wakes it.
	MaxSleep time.Duration

	idle int
}

// Busy records a poll that found work.
func (b *Backoff) Busy() { b.idle = 0 }

// Sleeping reports whether the idle streak has passed spinning and
// yielding.
func (b *Backoff) Sleeping() bool {
	spin, yield := b.Spin, b.Yield
	if spin == 0 {
		spin = 512
	}
	if yield == 0 {
		yield = 512
	}
	return b.idle > spin+yield
}

// Idle records a poll that found nothing and waits as long as the idle
// streak warrants. now and deadline (0: none) are on the engine clock.
func (b *Backoff) Idle(now, deadline int64) {
	spin, yield, maxSleep := b.Spin, b.Yield, b.MaxSleep
	if spin == 0 {
		spin = 512
	}
	if yield == 0 {
		yield = 512
	}
	if maxSleep == 0 {
		maxSleep = time.Millisecond
	}
	b.idle++
	switch {
	case b.idle <= spin:
		return
	case b.idle <= spin+yield:
		runtime.Gosched()
		return
	}
	// Sleep 1 µs, doubling every 16 empty polls, up to maxSleep.
	steps := min((b.idle-spin-yield)/16, 20)
	d := min(time.Microsecond<<steps, maxSleep)
	if deadline != 0 {
		if until := time.Duration(deadline - now); until < d {
			d = max(until, 0)
		}
	}
	if d > 0 {
		time.Sleep(d)
	}
}

// idle backs off; in the sleeping phase it blocks until frames arrive or
// the next timer is due: in the node's Sleeper when it has one (a node of
// a group, which another node may wake with frames for it), else in the
// link when the link can block. An idle device costs no CPU and still
// wakes at once.
func (n *Node) idle(b *Backoff, now int64) {
	if !b.Sleeping() {
		b.Idle(now, n.NextDeadline())
		return
	}
	if n.sleeper != nil {
		b.idle++
		// Announce the sleep before the last look at the handoff rings:
		// a node that publishes after that look sees the flag and wakes
		// us, one that published before it is seen by the look.
		n.sleeping.Store(true)
		if !n.handedInWaiting() && (n.waiting == nil || !n.waiting()) {
			_ = n.sleeper.Sleep(sleepTimeout(now, n.NextDeadline()))
		}
		n.sleeping.Store(false)
		return
	}
	w, ok := n.link.(link.Waiter)
	if !ok {
		b.Idle(now, n.NextDeadline())
		return
	}
	b.idle++
	_ = w.Wait(sleepTimeout(now, n.NextDeadline()))
}

// sleepTimeout bounds a blocking wait by the next timer deadline, and by
// 100 ms so that a stopped run is noticed.
func sleepTimeout(now, deadline int64) time.Duration {
	timeout := 100 * time.Millisecond
	if deadline != 0 {
		timeout = min(timeout, max(time.Duration(deadline-now), 0))
	}
	return timeout
}

// SetSleeper installs where the node blocks when idle (see Sleeper).
func (n *Node) SetSleeper(s Sleeper) { n.sleeper = s }

// SetWaiting installs f, which the node consults after announcing that it
// is about to sleep: work that f reports keeps it awake. Whoever creates
// such work publishes it first and then calls Wake, so that a node either
// sees the work or is woken.
func (n *Node) SetWaiting(f func() bool) { n.waiting = f }

// Sleep blocks in the node's Sleeper for up to timeout, as an idle Run
// loop does, for a caller that drives the node itself (manual progress):
// it returns early when frames arrive, when another node hands it some,
// or when Wake is called. Without a Sleeper it returns at once.
// now is the engine clock, which bounds the sleep by the next timer.
func (n *Node) Sleep(now int64, timeout time.Duration) {
	if n.sleeper == nil {
		return
	}
	n.sleeping.Store(true)
	if !n.handedInWaiting() && (n.waiting == nil || !n.waiting()) {
		_ = n.sleeper.Sleep(min(timeout, sleepTimeout(now, n.NextDeadline())))
	}
	n.sleeping.Store(false)
}

// Wake makes the node return from a sleep in its Sleeper, if it is in one
// or about to enter one. It costs an atomic load when the node is awake.
func (n *Node) Wake() {
	if n.sleeper != nil && n.sleeping.Load() {
		n.sleeper.Wake()
	}
}

// Run drives the node on the calling goroutine, locked to its OS thread,
// until ctx ends or hook fails: each pass polls the node, then calls hook
// (where the application posts work and reaps completions, on the same
// goroutine that owns the queue pairs), then backs off if neither did
// anything. clock is the engine clock in nanoseconds.
func (n *Node) Run(ctx context.Context, clock func() int64, hook func() (bool, error)) error {
	return runLoop(ctx, clock, hook, nil, n.Poll, n.idle, Backoff{})
}

// runLoop is the run-to-completion loop of Node.Run, Group.Run and each
// goroutine of Group.RunEach. setup, when not nil, runs first on the
// locked thread (CPU pinning); the thread then stays locked for good and
// dies with the goroutine, since its affinity is no longer the process's.
func runLoop(ctx context.Context, clock func() int64, hook func() (bool, error), setup func() error,
	poll func(int64) (bool, error), idle func(*Backoff, int64), pace Backoff) error {
	runtime.LockOSThread()
	pinned := setup != nil
	locked := true
	defer func() {
		if locked && !pinned {
			runtime.UnlockOSThread()
		}
	}()
	if pinned {
		if err := setup(); err != nil {
			return err
		}
	}
	b := pace
	for i := 0; ; i++ {
		now := clock()
		did, err := poll(now)
		if err != nil {
			return err
		}
		if hook != nil {
			h, err := hook()
			if err != nil {
				return err
			}
			did = did || h
		}
		if did {
			b.Busy()
			if !locked {
				runtime.LockOSThread()
				locked = true
			}
		} else {
			// A sleeping goroutine locked to its thread makes every wake a
			// hand-off between OS threads; idle, the lock buys nothing
			// (unless the thread is pinned).
			if locked && !pinned && b.Sleeping() {
				runtime.UnlockOSThread()
				locked = false
			}
			idle(&b, now)
		}
		// Busy, look at ctx now and then; idle passes are slow anyway.
		if (!did || i&255 == 0) && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
