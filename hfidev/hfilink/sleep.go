package hfilink

import (
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
)

// An idle worker's Sleep blocks on the chip's receive interrupt
// (hfidev.Context.Wait: poll(2) on the context's file, POLL_TYPE ANYRCV,
// which arms the interrupt when the RcvHdrQ is empty), in waits of at most
// SleepWaitMax, looking at the queue and the wake channel between them.
// Wake must end a wait at once, and the hfi1 driver's poll cannot be woken
// from user space, so the wait polls an eventfd beside the context's file
// (OPX's progress thread does the same, PSM's receive thread with a pipe)
// and Wake writes it — only while a wait may be blocked (the waiting
// flag), so an awake link's Wake costs an atomic load, no system call.
// The bound is for what the sources leave open on hardware: whether the
// chip interrupts for an entry written just before poll arms it (the
// driver's check and arm are under its lock, which the chip does not
// take); a lost interrupt then costs at most SleepWaitMax. Verified
// against the model only.
//
// Without it (Config.PollSleep, or once a Wait has failed: LastTxError
// says why) Sleep polls the queue: first after SleepPoll, then twice as
// long each time, up to SleepPollMax.
const (
	SleepPoll    = 20 * time.Microsecond
	SleepPollMax = time.Millisecond
	SleepWaitMax = 10 * time.Millisecond
)

var _ engine.Sleeper = (*Link)(nil)

// Sleep blocks the worker that owns the link until a packet waits in the
// RcvHdrQ, Wake is called or timeout passes: on the chip's interrupt, or
// polling (above). It may return early. It is the engine's idle wait
// (engine.Sleeper); a device installs it for the link's worker.
func (l *Link) Sleep(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if !l.pollSleep && l.sleepWait(deadline) {
		return nil
	}
	return l.sleepPoll(deadline)
}

// sleepWait sleeps on the interrupt; false when Wait failed, after which
// the link polls.
func (l *Link) sleepWait(deadline time.Time) bool {
	for {
		select {
		case <-l.wake:
			return true
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		// Announce the wait before the last look at the channel: a Wake
		// that sends after the look sees the flag and writes the
		// eventfd; one that sent before it is seen by the look.
		l.waiting.Store(true)
		select {
		case <-l.wake:
			l.waiting.Store(false)
			return true
		default:
		}
		ready, err := l.ctx.Wait(min(left, SleepWaitMax))
		l.waiting.Store(false)
		l.st.sleepWaits.Add(1)
		if err != nil {
			l.pollSleep = true
			l.lastErr.Store(&err)
			return false
		}
		if ready {
			return true // a packet is held for the next Recv, or on its way
		}
		// Timed out, or woken: the channel says whether by Wake (a
		// stale eventfd write from an earlier Wake is possible).
	}
}

// sleepPoll looks at the RcvHdrQ from SleepPoll to SleepPollMax apart.
func (l *Link) sleepPoll(deadline time.Time) error {
	for step := SleepPoll; ; step = min(2*step, SleepPollMax) {
		l.st.sleepPolls.Add(1)
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
	if l.waiting.Load() {
		l.ctx.Wake()
	}
}
