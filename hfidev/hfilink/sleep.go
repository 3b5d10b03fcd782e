package hfilink

import (
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
)

// How often an idle worker's Sleep looks at the RcvHdrQ: first after
// SleepPoll, then twice as long each time, up to SleepPollMax. The chip
// could interrupt instead (RECV_CTRL, POLL_TYPE and poll(2) on the
// context), but the model has no interrupts: a sleeping worker polls.
const (
	SleepPoll    = 20 * time.Microsecond
	SleepPollMax = time.Millisecond
)

var _ engine.Sleeper = (*Link)(nil)

// Sleep blocks the worker that owns the link until a packet waits in the
// RcvHdrQ, Wake is called or timeout passes, looking at the queue from
// SleepPoll to SleepPollMax apart. It is the engine's idle wait (engine.Sleeper); a device
// installs it for the link's worker.
func (l *Link) Sleep(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for step := SleepPoll; ; step = min(2*step, SleepPollMax) {
		if _, ok := l.rcv.Poll(); ok {
			return nil // held for the next Recv
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if l.timer == nil {
			l.timer = time.NewTimer(min(left, step))
		} else {
			l.timer.Reset(min(left, step))
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
