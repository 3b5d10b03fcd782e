package hfilink

import (
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
)

// SleepPoll is how often an idle worker's Sleep looks at the RcvHdrQ.
// The chip could interrupt instead (RECV_CTRL, POLL_TYPE and poll(2) on
// the context), but the model has no interrupts: a sleeping worker polls.
const SleepPoll = 20 * time.Microsecond

var _ engine.Sleeper = (*Link)(nil)

// Sleep blocks the worker that owns the link until a packet waits in the
// RcvHdrQ, Wake is called or timeout passes, looking at the queue every
// SleepPoll. It is the engine's idle wait (engine.Sleeper); a device
// installs it for the link's worker.
func (l *Link) Sleep(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, ok := l.rcv.Poll(); ok {
			return nil // held for the next Recv
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if l.timer == nil {
			l.timer = time.NewTimer(min(left, SleepPoll))
		} else {
			l.timer.Reset(min(left, SleepPoll))
		}
		select {
		case <-l.wake:
			l.timer.Stop()
			return nil
		case <-l.timer.C:
		}
	}
}

// Wake makes a Sleep in progress, or the next one, return; safe from any
// goroutine.
func (l *Link) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
