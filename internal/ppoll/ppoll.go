// Package ppoll waits on file descriptors with ppoll(2) for a whole
// timeout: a signal that interrupts the wait (EINTR: the Go runtime's
// preemption signals reach threads blocked in system calls) does not end
// it early, as it would a bare ppoll, which callers would take for a
// wake-up.
package ppoll

import (
	"time"

	"golang.org/x/sys/unix"
)

// Wait is ppoll(2) on fds for up to timeout (for ever when negative),
// begun again with the time left when a signal interrupts it. It returns
// how many descriptors are ready, 0 when the time ran out. It does not
// allocate.
func Wait(fds []unix.PollFd, timeout time.Duration) (int, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		var ts *unix.Timespec
		var t unix.Timespec
		if timeout >= 0 {
			left := time.Duration(0)
			if timeout > 0 {
				left = max(time.Until(deadline), 0)
			}
			t = unix.NsecToTimespec(int64(left))
			ts = &t
		}
		n, err := unix.Ppoll(fds, ts, nil)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}
