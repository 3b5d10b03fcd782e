package device

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/internal/ppoll"
)

// pollable is a link an idle worker can block on: an AF_XDP socket.
type pollable interface {
	FD() int
	// PrepareWait readies the link for a poll(2) on its FD: it reports
	// whether frames are already waiting, and shortens the timeout when
	// the link needs to be looked at again sooner.
	PrepareWait(timeout time.Duration) (bool, time.Duration)
}

// sleeper is where an idle worker blocks (engine.Sleeper): ppoll(2) on its
// links' sockets and on an eventfd that the other workers write to when
// they hand it frames while it sleeps. Writes to the eventfd are rare: a
// worker announces its sleep and is woken only then, not per frame.
type sleeper struct {
	links []pollable
	fds   []unix.PollFd // the links' sockets, then the eventfd
	efd   int
	one   [8]byte
	drain [8]byte
}

func newSleeper(links []pollable) (*sleeper, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	s := &sleeper{links: links, efd: efd}
	for _, l := range links {
		s.fds = append(s.fds, unix.PollFd{Fd: int32(l.FD()), Events: unix.POLLIN})
	}
	s.fds = append(s.fds, unix.PollFd{Fd: int32(efd), Events: unix.POLLIN})
	s.one[0] = 1 // eventfd counters are host-endian; this is little-endian
	return s, nil
}

// Sleep blocks until a link has frames, Wake is called or timeout passes.
func (s *sleeper) Sleep(timeout time.Duration) error {
	polled, err := waitLinks(s.links, s.fds, timeout)
	if polled && s.fds[len(s.fds)-1].Revents&unix.POLLIN != 0 {
		_, _ = unix.Read(s.efd, s.drain[:])
	}
	return err
}

// waitLinks gives each link its look first (PrepareWait: frames already
// received return at once, without polling; a link may shorten the
// wait), then waits in ppoll(2) on fds (the links' sockets, perhaps more)
// for what is left of timeout, whole through signals. It reports whether
// it polled, so that fds' Revents are this wait's.
func waitLinks(links []pollable, fds []unix.PollFd, timeout time.Duration) (bool, error) {
	for _, l := range links {
		ready, t := l.PrepareWait(timeout)
		if ready {
			return false, nil
		}
		timeout = min(timeout, t)
	}
	_, err := ppoll.Wait(fds, max(timeout, 0))
	return true, err
}

// Wake makes a Sleep in progress, or the next one, return.
func (s *sleeper) Wake() { _, _ = unix.Write(s.efd, s.one[:]) }

func (s *sleeper) close() error { return unix.Close(s.efd) }

// setSleepers gives each worker a sleeper on its link, and the group one
// on all of them (for Run), when every link is a pollable socket. Over
// in-memory links the workers back off with short sleeps instead.
func (d *Device) setSleepers() {
	// A link that is its own sleeper (an in-memory switch port) serves
	// its worker directly.
	for i, l := range d.links {
		if s, ok := l.(engine.Sleeper); ok {
			d.group.Node(i).SetSleeper(s)
		}
	}
	var all []pollable
	for _, l := range d.links {
		p, ok := l.(pollable)
		if !ok {
			return
		}
		all = append(all, p)
	}
	var made []*sleeper
	for i, p := range all {
		s, err := newSleeper([]pollable{p})
		if err != nil {
			break
		}
		made = append(made, s)
		d.group.Node(i).SetSleeper(s)
	}
	if len(made) == len(all) {
		if s, err := newSleeper(all); err == nil {
			made = append(made, s)
			d.group.SetSleeper(s)
		}
	}
	d.sleepers = made
}

// PinCPU binds the calling OS thread to cpu (the caller locks its
// goroutine to the thread): how a worker is pinned, here and in the
// daemon.
func PinCPU(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a worker to CPU %d: %w", cpu, err)
	}
	return nil
}
