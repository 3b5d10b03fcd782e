// Package backoff paces a polling loop: it spins while polls find work
// and backs off step by step when they do not, so that a busy loop never
// sleeps and an idle one costs next to no CPU. The engine's workers and
// perf's raw baselines pace themselves with it alike.
package backoff

import (
	"runtime"
	"time"
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

// Skip records a poll that found nothing, for a caller that waits in its
// own way (blocking in the kernel) once Sleeping says so.
func (b *Backoff) Skip() { b.idle++ }

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
// streak warrants. now and deadline (0: none) are on the caller's clock, in
// nanoseconds; a sleep never runs past deadline.
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
