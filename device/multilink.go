package device

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// multiLink joins the per-queue links (one AF_XDP socket per receive queue)
// of a device into one link for a single engine. Receives take turns over
// the queues. Each frame is sent on the queue its UDP source port picks, so
// the frames of one queue pair stay in order on one queue (the source port
// is derived from the QP numbers).
type multiLink struct {
	links []link.Link
	next  int
	max   int
	polls []pollable // the links, for Wait (nil until the first)
	fds   []unix.PollFd
	zc    []link.ZeroCopyReceiver // every queue's, or nil
	lent  []bool
}

// copyingMultiLink is a multiLink without RecvZC.
type copyingMultiLink struct{ m *multiLink }

func (c copyingMultiLink) Send(f [][]byte) (int, error)          { return c.m.Send(f) }
func (c copyingMultiLink) Recv(b [][]byte, s []int) (int, error) { return c.m.Recv(b, s) }
func (c copyingMultiLink) MaxFrame() int                         { return c.m.MaxFrame() }
func (c copyingMultiLink) Wait(t time.Duration) error            { return c.m.Wait(t) }

func newMultiLink(links []link.Link) link.Link {
	if len(links) == 1 {
		return links[0]
	}
	m := &multiLink{links: links, max: links[0].MaxFrame(), lent: make([]bool, len(links))}
	for _, l := range links {
		m.max = min(m.max, l.MaxFrame())
		if zc, ok := l.(link.ZeroCopyReceiver); ok {
			m.zc = append(m.zc, zc)
		}
	}
	if len(m.zc) != len(links) {
		// Some queue cannot lend: copy everywhere, through a wrapper
		// that hides RecvZC.
		return copyingMultiLink{m}
	}
	return m
}

func (m *multiLink) MaxFrame() int { return m.max }

// queueOf picks the transmit queue of a RoCEv2 frame from its UDP source
// port; frames it cannot read go to queue 0.
func (m *multiLink) queueOf(f []byte) int {
	off := wire.EthernetSize
	if len(f) < off+wire.IPv4MinSize {
		return 0
	}
	et := binary.BigEndian.Uint16(f[12:])
	if et == wire.EtherTypeVLAN {
		et = binary.BigEndian.Uint16(f[16:])
		off += wire.VLANSize
	}
	switch et {
	case wire.EtherTypeIPv4:
		off += int(f[off]&0xf) * 4
	case wire.EtherTypeIPv6:
		off += wire.IPv6Size
	default:
		return 0
	}
	if len(f) < off+2 {
		return 0
	}
	return int(binary.BigEndian.Uint16(f[off:])) % len(m.links)
}

// Send sends each run of consecutive frames bound for the same queue with
// one call to that queue's link, in order, and stops at the first frame a
// queue refuses, so the count it returns has the link contract's meaning:
// frames before it were taken, none after it.
func (m *multiLink) Send(frames [][]byte) (int, error) {
	taken := 0
	for taken < len(frames) {
		q := m.queueOf(frames[taken])
		end := taken + 1
		for end < len(frames) && m.queueOf(frames[end]) == q {
			end++
		}
		n, err := m.links[q].Send(frames[taken:end])
		taken += n
		if err != nil || taken < end {
			return taken, err
		}
	}
	return taken, nil
}

// Recv takes turns over the queues, starting after the last one served.
func (m *multiLink) Recv(bufs [][]byte, sizes []int) (int, error) {
	got := 0
	for i := 0; i < len(m.links) && got < len(bufs); i++ {
		q := (m.next + i) % len(m.links)
		n, err := m.links[q].Recv(bufs[got:], sizes[got:])
		if err != nil {
			return got, err
		}
		got += n
	}
	m.next = (m.next + 1) % len(m.links)
	return got, nil
}

// Wait blocks until one of the queues has frames or timeout passes: one
// ppoll(2) over every queue's socket, after each had its look
// (waitLinks).
func (m *multiLink) Wait(timeout time.Duration) error {
	if m.polls == nil {
		var polls []pollable
		var fds []unix.PollFd
		for _, l := range m.links {
			p, ok := l.(pollable)
			if !ok {
				time.Sleep(min(timeout, time.Millisecond))
				return nil
			}
			polls = append(polls, p)
			fds = append(fds, unix.PollFd{Fd: int32(p.FD()), Events: unix.POLLIN})
		}
		m.polls, m.fds = polls, fds
	}
	_, err := waitLinks(m.polls, m.fds, timeout)
	return err
}

// RecvZC lends received frames from the queues in turn, when every queue's
// link can lend them; see link.ZeroCopyReceiver.
func (m *multiLink) RecvZC(views [][]byte) int {
	got := 0
	for i := 0; i < len(m.links) && got < len(views); i++ {
		q := (m.next + i) % len(m.links)
		zc := m.zc[q]
		n := zc.RecvZC(views[got:])
		if n > 0 {
			m.lent[q] = true
		}
		got += n
	}
	m.next = (m.next + 1) % len(m.links)
	return got
}

// ReleaseRx returns every queue's lent frames.
func (m *multiLink) ReleaseRx() {
	for q, lent := range m.lent {
		if lent {
			m.zc[q].ReleaseRx()
			m.lent[q] = false
		}
	}
}
