package model

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// poll(2) on a context's file, RECV_CTRL and POLL_TYPE, as the hfi1 driver
// does them ([K] is the Cornelis driver, opa-hfi1@bfb3da4):
//
//   - POLL_TYPE (file_ops.c:314-318): get_user of an int (EFAULT), stored
//     as the context's u16 poll_type unchecked; a context starts at
//     ANYRCV (0: its hfi1_ctxtdata is kzalloc'd, init.c:385).
//   - poll (file_ops.c hfi1_poll, 666-682): POLLERR without a context or
//     with a poll_type other than ANYRCV and URGENT.
//   - ANYRCV (poll_next, 1566-1587): under uctxt_lock, if the queue is
//     empty — hdrqempty (chip.c:11953-11966): RcvHdrHead's head field, as
//     software last wrote it, equals the tail (the RcvHdrTail register, or
//     the RTAIL page with DMA_RTAIL) — it sets HFI1_CTXT_WAITING_RCV and
//     arms the receive-available interrupt (HFI1_RCVCTRL_INTRAVAIL_ENB:
//     RcvCtxtCtrl.IntrAvail, chip.c:12179-12183) and reports nothing, so
//     poll(2) sleeps on the context's wait queue; otherwise POLLIN. The
//     check and the arm are one step under the lock: a packet written
//     before it is seen by the check, one written after it interrupts.
//   - URGENT (poll_urgent, 1543-1564): POLLIN when the urgent count moved
//     since the last poll that reported it, else HFI1_CTXT_WAITING_URG.
//   - The interrupt (intr.c handle_user_interrupt, 201-221; chip.c
//     is_rcv_avail_int, is_rcv_urgent_int): WAITING_RCV cleared, the wait
//     queue woken and IntrAvail disarmed; or else, with WAITING_URG,
//     that cleared, the urgent count incremented and the queue woken.
//     The urgent interrupt is enabled for every user context
//     (HFI1_RCVCTRL_URGENT_ENB, file_ops.c user_init); what raises it is
//     a packet with KDETH.Intr (PSM: "Generate interrupt only when packet
//     sets HFI_KPF_INTR", opa_utils_gen1.c:110-116).
//   - RECV_CTRL (manage_rcvq, 1634-1666): nothing for a subcontext; get_user
//     of an int (EFAULT); nonzero clears the RTAIL page and enables the
//     receive context (HFI1_RCVCTRL_CTXT_ENB: from disabled, the queue
//     restarts as after a freeze; already enabled, nothing more), zero
//     disables it (CTXT_DIS: packets for it are dropped). It returns 0.
//     It has nothing to do with interrupts.
//
// Not modeled: interrupt mitigation (RcvAvailTimeOut and RcvHdrHead's
// Counter, chip.c adjust_rcv_timeout: the model interrupts at the first
// packet written while armed) and whether the chip interrupts for an entry
// written just before IntrAvail is set (the model's check and arm are
// atomic; the driver's are under a lock the chip does not take).

// PollStats counts what the unit's Poll did: how a caller blocked.
type PollStats struct {
	Calls       uint64 // Poll calls
	Waits       uint64 // times a Poll slept: the file had nothing to report
	Interrupted uint64 // sleeps ended by the context's interrupt
	Woken       uint64 // sleeps ended by the Waker
	TimedOut    uint64 // sleeps ended by the timeout
}

type pollCounters struct {
	calls, waits, interrupted, woken, timedOut atomic.Uint64
}

// PollStats returns the unit's poll counters.
func (u *Unit) PollStats() PollStats {
	p := &u.polls
	return PollStats{Calls: p.calls.Load(), Waits: p.waits.Load(), Interrupted: p.interrupted.Load(),
		Woken: p.woken.Load(), TimedOut: p.timedOut.Load()}
}

// waker is the model's sys.Waker: the eventfd's counter as a channel of one.
type waker struct {
	u *Unit
	c chan struct{}
}

func (w *waker) Wake() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *waker) Close() error { return nil }

// NewWaker implements sys.Sys.
func (u *Unit) NewWaker() (sys.Waker, error) {
	return &waker{u: u, c: make(chan struct{}, 1)}, nil
}

// Poll implements sys.Sys as poll(2) does on the file and the waker:
// each pass asks the file (hfi1_poll) and the waker; with nothing to
// report it sleeps until the context's interrupt wakes its wait queue, the
// waker is woken or the timeout passes, then passes once more and returns
// (do_poll). A descriptor the unit does not know reports POLLNVAL; a waker
// from elsewhere is EINVAL.
func (u *Unit) Poll(fd int, w sys.Waker, timeout time.Duration) (int16, bool, error) {
	var wc chan struct{}
	if w != nil {
		mw, ok := w.(*waker)
		if !ok || mw.u != u {
			return 0, false, unix.EINVAL
		}
		wc = mw.c
	}
	p := &u.polls
	p.calls.Add(1)
	last := timeout == 0
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	woken := false
	for {
		rev, q := u.pollFile(fd)
		if wc != nil && !woken {
			select {
			case <-wc:
				woken = true
			default:
			}
		}
		if rev != 0 || woken || last {
			return rev, woken, nil
		}
		p.waits.Add(1)
		select {
		case <-q:
			p.interrupted.Add(1)
		case <-wc:
			woken = true
			p.woken.Add(1)
		case <-expired:
			last = true
			p.timedOut.Add(1)
		}
	}
}

// pollFile is hfi1_poll: the file's revents (POLLIN, POLLERR; POLLNVAL
// for an unknown descriptor), or 0 and the wait queue to sleep on.
func (u *Unit) pollFile(fd int) (int16, <-chan struct{}) {
	u.mu.Lock()
	f, ok := u.files[fd]
	var c *context
	var pt uint16
	if ok && f.ctxt != nil {
		c, pt = f.ctxt, f.ctxt.pollType
	}
	u.mu.Unlock()
	switch {
	case !ok:
		return unix.POLLNVAL, nil
	case c == nil:
		return unix.POLLERR, nil
	case pt == abi.PollTypeAnyRcv:
		return c.rcv.pollNext()
	case pt == abi.PollTypeUrgent:
		return c.rcv.pollUrgent()
	}
	return unix.POLLERR, nil
}

// intrState is a receive context's interrupt state, under rcvCtxt.mu (the
// driver's uctxt_lock).
type intrState struct {
	intrAvail  bool          // RcvCtxtCtrl.IntrAvail: the receive-available interrupt is armed
	waitingRcv bool          // HFI1_CTXT_WAITING_RCV
	waitingUrg bool          // HFI1_CTXT_WAITING_URG
	urgent     uint32        // uctxt->urgent
	urgentPoll uint32        // uctxt->urgent_poll
	waitq      chan struct{} // the wait queue: closed to wake it
}

// waitQueue is poll_wait: the channel the next wake-up closes.
func (r *rcvCtxt) waitQueue() <-chan struct{} {
	if r.intr.waitq == nil {
		r.intr.waitq = make(chan struct{})
	}
	return r.intr.waitq
}

func (r *rcvCtxt) wakeUp() {
	if r.intr.waitq != nil {
		close(r.intr.waitq)
		r.intr.waitq = nil
	}
}

// hdrqEmpty is hdrqempty: RcvHdrHead's head field as software wrote it
// against the tail.
func (r *rcvCtxt) hdrqEmpty() bool {
	head := loadWord(r.uregs, abi.URegRcvHdrHead) & abi.RcvHdrHeadMask
	return head == uint64(r.tail*r.entDWs)
}

// pollNext is poll_next (ANYRCV).
func (r *rcvCtxt) pollNext() (int16, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.waitQueue()
	if r.hdrqEmpty() {
		r.intr.waitingRcv = true
		r.intr.intrAvail = true
		return 0, q
	}
	return unix.POLLIN, nil
}

// pollUrgent is poll_urgent (URGENT).
func (r *rcvCtxt) pollUrgent() (int16, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.waitQueue()
	if r.intr.urgent != r.intr.urgentPoll {
		r.intr.urgentPoll = r.intr.urgent
		return unix.POLLIN, nil
	}
	r.intr.waitingUrg = true
	return 0, q
}

// interrupts raises what a packet just written raises: the
// receive-available interrupt while IntrAvail is armed, the urgent one for
// a packet with KDETH.Intr. Under r.mu.
func (r *rcvCtxt) interrupts(urgent bool) {
	if r.intr.intrAvail {
		r.stats.AvailInterrupts++
		r.userInterrupt()
	}
	if urgent {
		r.stats.UrgentInterrupts++
		r.userInterrupt()
	}
}

// userInterrupt is handle_user_interrupt. Under r.mu.
func (r *rcvCtxt) userInterrupt() {
	s := &r.intr
	switch {
	case s.waitingRcv:
		s.waitingRcv = false
		r.wakeUp()
		s.intrAvail = false
	case s.waitingUrg:
		s.waitingUrg = false
		s.urgent++
		r.wakeUp()
	}
}

// clearTail is clear_rcvhdrtail: the RTAIL page written 0.
func (r *rcvCtxt) clearTail() {
	if r.rtail == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	storeWord(r.rtail, 0, 0)
}

// recvCtrl is RECV_CTRL (manage_rcvq) on f's context. Under u.mu.
func (u *Unit) recvCtrl(f *file, enable bool) {
	if f.subctxt != 0 {
		return
	}
	c := f.ctxt
	if !enable {
		u.rcvOff[c.idx].Store(true)
		return
	}
	c.rcv.clearTail()
	if u.rcvOff[c.idx].Load() {
		c.rcv.restart()
		u.rcvOff[c.idx].Store(false)
	}
}
