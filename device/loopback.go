package device

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// socketLink is what a worker of a device opened in process runs on: an
// AF_XDP socket (dataplane/xsk), with its zero-copy transmit and receive
// and the descriptor its sleeper polls.
type socketLink interface {
	link.Link
	link.TxFramer
	link.ZeroCopyReceiver
	link.Waiter
	pollable
}

// loopLink is the link of a worker of a device opened in process: its
// socket, except that frames to the device itself (its MAC and one of its
// addresses), which the NIC would carry away and never bring back, come
// back on the worker's own receive side, as Linux's rxe loops a packet
// for a local address back (and as a daemon switches them between its
// applications). The worker hands a looped frame on to the worker that
// owns its queue pair, as a frame the NIC steered to the wrong queue.
//
// Like the socket, it is used by one goroutine at a time, the worker's:
// no lock. The looped frames wait in a ring of buffers, made on the first
// one. A full ring holds the sender back (TxRoom, Send); a frame built in
// place all the same is dropped (counted), as a NIC drops on a full
// queue, and sent again by its transport.
type loopLink struct {
	socketLink
	mac   [6]byte
	addrs []netip.Addr // the device's addresses, unmapped

	bufs    [][]byte // the ring: loopRing frames of MaxFrame bytes
	lens    []int
	head, n int    // the oldest frame, and how many the ring holds
	lent    int    // frames from the head lent by RecvZC
	txb     []byte // the buffer of the last TxBuf

	looped, dropped atomic.Uint64
}

// loopRing is how many frames a worker's loopback ring holds.
const loopRing = 256

func newLoopLink(s socketLink, mac [6]byte, gids []netip.Addr) *loopLink {
	l := &loopLink{socketLink: s, mac: mac}
	for _, g := range gids {
		l.addrs = append(l.addrs, g.Unmap())
	}
	return l
}

// local reports whether frame f is addressed to the device itself.
func (l *loopLink) local(f []byte) bool {
	if len(f) < wire.EthernetSize || [6]byte(f[:6]) != l.mac {
		return false
	}
	var dst netip.Addr
	switch {
	case f[12] == 0x08 && f[13] == 0x00 && len(f) >= 34:
		dst = netip.AddrFrom4([4]byte(f[30:34]))
	case f[12] == 0x86 && f[13] == 0xdd && len(f) >= 54:
		dst = netip.AddrFrom16([16]byte(f[38:54]))
	default:
		return false
	}
	for _, a := range l.addrs {
		if a == dst {
			return true
		}
	}
	return false
}

// loop copies frame f onto the receive ring, or drops it when the ring is
// full.
func (l *loopLink) loop(f []byte) {
	if l.bufs == nil {
		size := l.MaxFrame()
		l.bufs, l.lens = make([][]byte, loopRing), make([]int, loopRing)
		mem := make([]byte, loopRing*size)
		for i := range l.bufs {
			l.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
		}
	}
	if l.n == len(l.bufs) || len(f) > len(l.bufs[0]) {
		l.dropped.Add(1)
		return
	}
	i := (l.head + l.n) % len(l.bufs)
	l.lens[i] = copy(l.bufs[i], f)
	l.n++
	l.looped.Add(1)
}

// Send sends frames, looping back those for the device itself.
func (l *loopLink) Send(frames [][]byte) (int, error) {
	start := 0
	for i, f := range frames {
		if !l.local(f) {
			continue
		}
		if start < i {
			k, err := l.socketLink.Send(frames[start:i])
			if k < i-start || err != nil {
				return start + k, err
			}
		}
		if l.full() {
			return i, nil // backpressure: the worker receives them first
		}
		l.loop(f)
		start = i + 1
	}
	if start == len(frames) {
		return start, nil
	}
	k, err := l.socketLink.Send(frames[start:])
	return start + k, err
}

// full reports whether the loopback ring has no room.
func (l *loopLink) full() bool { return l.bufs != nil && l.n == len(l.bufs) }

// TxRoom is the socket's room, while looped frames leave room for as many
// more: the worker receives them before it builds more.
func (l *loopLink) TxRoom() int {
	r := l.socketLink.TxRoom()
	if l.bufs != nil {
		r = min(r, len(l.bufs)-l.n)
	}
	return r
}

// TxBuf lends the socket's next transmit buffer.
func (l *loopLink) TxBuf() []byte {
	l.txb = l.socketLink.TxBuf()
	return l.txb
}

// TxSubmit queues the frame built in the last TxBuf, or loops it back
// (and gives the buffer back to the socket) when it is for the device.
func (l *loopLink) TxSubmit(n int) {
	if n > 0 && n <= len(l.txb) && l.local(l.txb[:n]) {
		l.loop(l.txb[:n])
		n = 0
	}
	l.txb = nil
	l.socketLink.TxSubmit(n)
}

// Recv copies the looped frames, then the socket's.
func (l *loopLink) Recv(bufs [][]byte, sizes []int) (int, error) {
	l.ReleaseRx()
	k := 0
	for ; l.n > 0 && k < len(bufs) && k < len(sizes); k++ {
		b := bufs[k][:cap(bufs[k])]
		if l.lens[l.head] > len(b) {
			break
		}
		sizes[k] = copy(b, l.bufs[l.head][:l.lens[l.head]])
		l.head = (l.head + 1) % len(l.bufs)
		l.n--
	}
	if k == len(bufs) || k == len(sizes) {
		return k, nil
	}
	m, err := l.socketLink.Recv(bufs[k:], sizes[k:])
	return k + m, err
}

// RecvZC lends the looped frames in place, then the socket's.
func (l *loopLink) RecvZC(views [][]byte) int {
	l.releaseLooped()
	k := 0
	for ; k < l.n && k < len(views); k++ {
		i := (l.head + k) % len(l.bufs)
		views[k] = l.bufs[i][:l.lens[i]:l.lens[i]]
	}
	l.lent = k
	return k + l.socketLink.RecvZC(views[k:])
}

// ReleaseRx gives back the frames of the last RecvZC.
func (l *loopLink) ReleaseRx() {
	l.releaseLooped()
	l.socketLink.ReleaseRx()
}

func (l *loopLink) releaseLooped() {
	if l.lent > 0 {
		l.head = (l.head + l.lent) % len(l.bufs)
		l.n -= l.lent
		l.lent = 0
	}
}

// PrepareWait reports looped frames as waiting.
func (l *loopLink) PrepareWait(timeout time.Duration) (bool, time.Duration) {
	if l.n > l.lent {
		return true, timeout
	}
	return l.socketLink.PrepareWait(timeout)
}

// Wait returns at once while looped frames wait.
func (l *loopLink) Wait(timeout time.Duration) error {
	if l.n > l.lent {
		return nil
	}
	return l.socketLink.Wait(timeout)
}

// Looped counts the frames the device looped back to itself in process
// (addressed to its own MAC and addresses), and those it dropped on a
// full loopback ring; zero for a device attached to a daemon, whose
// daemon loops them back (`status`: looped).
func (d *Device) Looped() (looped, dropped uint64) {
	for _, l := range d.links {
		if l, ok := l.(*loopLink); ok {
			looped += l.looped.Load()
			dropped += l.dropped.Load()
		}
	}
	return looped, dropped
}
