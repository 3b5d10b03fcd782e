package perf

import (
	"runtime"
	"time"
)

// backoff paces a polling loop as the engine's workers pace theirs: it
// spins while polls find work and backs off step by step when they do
// not (512 empty polls spinning, 512 yielding, then sleeps from 1 µs
// doubling every 16 empty polls up to 1 ms), so that a busy loop never
// sleeps and an idle one costs next to no CPU.
type backoff struct{ idle int }

const backoffSpin, backoffYield = 512, 512

// Busy records a poll that found work.
func (b *backoff) Busy() { b.idle = 0 }

// Idle records a poll that found nothing and waits as long as the idle
// streak warrants.
func (b *backoff) Idle() {
	b.idle++
	switch {
	case b.idle <= backoffSpin:
		return
	case b.idle <= backoffSpin+backoffYield:
		runtime.Gosched()
		return
	}
	steps := min((b.idle-backoffSpin-backoffYield)/16, 20)
	time.Sleep(min(time.Microsecond<<steps, time.Millisecond))
}
