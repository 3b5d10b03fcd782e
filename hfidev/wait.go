package hfidev

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// Blocking on the chip's receive interrupt ([K] file_ops.c hfi1_poll,
// poll_next; intr.c handle_user_interrupt; the model's poll.go):
// poll(2) on the context's file, with the poll type ANYRCV, reports POLLIN
// while the RcvHdrQ's tail differs from RcvHdrHead as software last wrote
// it, and otherwise arms the receive-available interrupt and sleeps until
// a packet comes. Wait relies on that check-then-arm, made under the
// driver's lock, for not losing a packet that lands between its own look
// at the queue and the poll; and on the head register being current — a
// lazily written head that lags makes poll report POLLIN at once, every
// time — which the Receiver ensures: a Poll that finds the queue empty
// writes the head it holds back. OPX's progress thread (fi_opx_progress.c)
// polls the context's file the same way beside an eventfd; PSM's receive
// thread (ptl_rcvthread.c) with the URGENT type beside a pipe.

// SetPollType sets what poll(2) on the context waits for (POLL_TYPE):
// abi.PollTypeAnyRcv or abi.PollTypeUrgent. The driver takes any int and
// keeps its low 16 bits; poll then fails for other values (Wait's ErrPoll).
// Wait sets abi.PollTypeAnyRcv again if another type was set.
func (c *Context) SetPollType(t int32) error {
	le.PutUint32(c.intArg[:], uint32(t))
	if err := c.ioctl(abi.IoctlPollType, c.intArg[:]); err != nil {
		return err
	}
	c.pollType = t
	return nil
}

// SetRecvEnabled enables or disables the receive context (RECV_CTRL):
// while it is disabled the chip drops the packets for it. Enabling a
// context this call disabled restarts its RcvHdrQ (entry 0, RcvSeq 1, the
// eager head 0, as after a freeze) and the Receiver with it: entries not
// yet polled are lost, and a packet held by Poll must not be used
// afterwards. Enabling a context that is not disabled does nothing here:
// the driver would only zero the RTAIL page under a running receiver.
// A frozen context (abi.EventFrozen) is restarted by Reset instead:
// enabling it is ErrFrozen. RECV_CTRL has nothing to do with interrupts.
func (c *Context) SetRecvEnabled(on bool) error {
	if on && !c.rcvOff {
		return nil
	}
	if on && c.Events()&abi.EventFrozen != 0 {
		return fmt.Errorf("hfidev: %s RECV_CTRL: %w: Reset it", c.path, ErrFrozen)
	}
	v := uint32(0)
	if on {
		v = 1
	}
	le.PutUint32(c.intArg[:], v)
	if err := c.ioctl(abi.IoctlRecvCtrl, c.intArg[:]); err != nil {
		return err
	}
	if on {
		c.rcv.restart()
	}
	c.rcvOff = !on
	return nil
}

// Wait blocks until the RcvHdrQ may hold a packet the Receiver has not
// returned, Wake is called or timeout passes (negative: no limit). It
// reports true for the first: a packet is held by the Receiver or poll(2)
// said POLLIN; Receiver.Poll tells which entries are there. It looks at
// the queue first, which writes RcvHdrHead when it lags, then polls the
// context's file (POLL_TYPE ANYRCV) and the context's waker. Owned by the
// Receiver's goroutine, like the Receiver.
func (c *Context) Wait(timeout time.Duration) (bool, error) {
	if _, ok := c.rcv.Poll(); ok {
		return true, nil
	}
	if c.pollType != abi.PollTypeAnyRcv {
		if err := c.SetPollType(abi.PollTypeAnyRcv); err != nil {
			return false, err
		}
	}
	if c.waker == nil {
		return false, fmt.Errorf("hfidev: %s poll: %w", c.path, unix.EBADF) // closed
	}
	rev, _, err := c.sys.Poll(c.fd, c.waker, timeout)
	if err != nil {
		return false, fmt.Errorf("hfidev: %s poll: %w", c.path, err)
	}
	if rev&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
		return false, fmt.Errorf("%w: %s revents %#x", ErrPoll, c.path, rev)
	}
	return rev&unix.POLLIN != 0, nil
}

// Wake makes a Wait in progress, or the next one, return; safe from any
// goroutine, and a no-op once the context is closed. On the device it is
// a write to an eventfd (a system call): callers that wake often should do
// so only while a Wait may be blocked.
func (c *Context) Wake() {
	c.wakeMu.Lock()
	if c.waker != nil {
		c.waker.Wake()
	}
	c.wakeMu.Unlock()
}
