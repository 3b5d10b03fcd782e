package engine

import (
	"context"
	"runtime"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/internal/backoff"
)

// Backoff paces a polling loop (see internal/backoff, which the raw
// baselines of perf share).
type Backoff = backoff.Backoff

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
		b.Skip()
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
	b.Skip()
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
	return runLoop(ctx, clock, hook, nil, n.Poll, n.idle)
}

// runLoop is the run-to-completion loop of Node.Run, Group.Run and each
// goroutine of Group.RunEach. setup, when not nil, runs first on the
// locked thread (CPU pinning); the thread then stays locked for good and
// dies with the goroutine, since its affinity is no longer the process's.
func runLoop(ctx context.Context, clock func() int64, hook func() (bool, error), setup func() error,
	poll func(int64) (bool, error), idle func(*Backoff, int64)) error {
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
	var b Backoff
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
