// Package udpbatch sends and receives batches of UDP datagrams on a
// connected or bound *net.UDPConn with sendmmsg(2) and recvmmsg(2), with
// every header, iovec and buffer allocated once: the kernel-stack baseline
// a careful user would write, which the perf baselines and benchmarks
// measure softfabric against. (golang.org/x/net/ipv4's ReadBatch and
// WriteBatch allocate per message.)
package udpbatch

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// Conn batches datagrams on one UDP socket. It is not safe for concurrent
// use by several senders or several receivers; one of each is fine, as
// long as the receiver alone echoes.
type Conn struct {
	rc syscall.RawConn

	// Sending: one header and iovec per datagram of a batch.
	shdr []mmsghdr
	siov []unix.Iovec
	sn   int // datagrams handed to the current sendmmsg
	sent int
	serr error
	sfn  func(fd uintptr) bool

	// Receiving: bufs are the datagram buffers, lens what arrived, names
	// where from.
	rhdr  []mmsghdr
	riov  []unix.Iovec
	names []unix.RawSockaddrInet6
	bufs  [][]byte
	lens  []int
	got   int
	rerr  error
	rwait bool // park in the poller while nothing is waiting
	rfn   func(fd uintptr) bool

	// Echoing: datagrams of the last receive back to their sources.
	ehdr  []mmsghdr
	eiov  []unix.Iovec
	eoff  int // first header of the current echo sendmmsg
	en    int // headers it is given
	esent int
	eerr  error
	efn   func(fd uintptr) bool
}

// New prepares batches of up to batch datagrams on c, receiving into
// buffers of bufSize bytes.
func New(c *net.UDPConn, batch, bufSize int) (*Conn, error) {
	if batch <= 0 || bufSize <= 0 {
		return nil, errors.New("udpbatch: batch and buffer size must be positive")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("udpbatch: %w", err)
	}
	b := &Conn{
		rc:   rc,
		shdr: make([]mmsghdr, batch), siov: make([]unix.Iovec, batch),
		rhdr: make([]mmsghdr, batch), riov: make([]unix.Iovec, batch),
		names: make([]unix.RawSockaddrInet6, batch),
		bufs:  make([][]byte, batch), lens: make([]int, batch),
		ehdr: make([]mmsghdr, batch), eiov: make([]unix.Iovec, batch),
	}
	mem := make([]byte, batch*bufSize)
	for i := range b.bufs {
		b.bufs[i] = mem[i*bufSize : (i+1)*bufSize : (i+1)*bufSize]
		b.riov[i].Base = &b.bufs[i][0]
		b.riov[i].SetLen(bufSize)
		b.rhdr[i].hdr.Iov = &b.riov[i]
		b.rhdr[i].hdr.SetIovlen(1)
		b.rhdr[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.eiov[i].Base = &b.bufs[i][0]
		b.ehdr[i].hdr.Iov = &b.eiov[i]
		b.ehdr[i].hdr.SetIovlen(1)
		b.ehdr[i].hdr.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		b.shdr[i].hdr.Iov = &b.siov[i]
		b.shdr[i].hdr.SetIovlen(1)
	}
	b.sfn = b.sendmmsg
	b.rfn = b.recvmmsg
	b.efn = b.echommsg
	return b, nil
}

// SetSegment has the kernel cut every datagram Send hands it that is
// longer than size into datagrams of size bytes (UDP generic segmentation
// offload, UDP_SEGMENT): one pass through the stack for up to 64 KiB, and
// datagrams that each fit the link, so no IP fragments. size 0 turns it
// off. Kernels before 4.18 refuse it.
func (b *Conn) SetSegment(size int) error {
	return b.setsockopt(unix.IPPROTO_UDP, unix.UDP_SEGMENT, size, "UDP_SEGMENT")
}

// SetGRO has the kernel hand Recv consecutive datagrams of one flow
// coalesced into one buffer (UDP_GRO), where the receiving interface
// aggregates (GRO); the buffers should then be 64 KiB. Datagram
// boundaries are lost: for a receiver that counts bytes.
func (b *Conn) SetGRO(on bool) error {
	v := 0
	if on {
		v = 1
	}
	return b.setsockopt(unix.IPPROTO_UDP, unix.UDP_GRO, v, "UDP_GRO")
}

func (b *Conn) setsockopt(level, opt, v int, name string) error {
	var serr error
	if err := b.rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return fmt.Errorf("udpbatch: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("udpbatch: setting %s: %w", name, serr)
	}
	return nil
}

// Send sends datagrams (at most the batch size; each non-empty) on the
// connected socket, waiting while the socket buffer is full, and returns
// how many the kernel took.
func (b *Conn) Send(datagrams [][]byte) (int, error) {
	n := min(len(datagrams), len(b.shdr))
	for i, d := range datagrams[:n] {
		if len(d) == 0 {
			return 0, errors.New("udpbatch: empty datagram")
		}
		b.siov[i].Base = &d[0]
		b.siov[i].SetLen(len(d))
	}
	b.sn, b.sent, b.serr = n, 0, nil
	if err := b.rc.Write(b.sfn); err != nil {
		return 0, err
	}
	return b.sent, b.serr
}

func (b *Conn) sendmmsg(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.shdr[0])), uintptr(b.sn), unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		b.sent = int(r)
	case unix.EAGAIN:
		return false // wait until writable
	case unix.EINTR:
		return b.sendmmsg(fd)
	default:
		b.serr = e
	}
	return true
}

// Recv receives up to a batch of datagrams without blocking; 0 and nil
// when none is waiting. Datagram i is Buf(i), valid until the next Recv.
func (b *Conn) Recv() (int, error) {
	b.got, b.rerr, b.rwait = 0, nil, false
	if err := b.rc.Read(b.rfn); err != nil {
		return 0, err
	}
	return b.got, b.rerr
}

// RecvWait is Recv for a receiver that sleeps while nothing is waiting:
// it parks the goroutine in the runtime's poller (not spinning, so the
// CPU stays with the sender and the kernel) until a datagram arrives, the
// socket's read deadline passes or it is closed.
func (b *Conn) RecvWait() (int, error) {
	b.got, b.rerr, b.rwait = 0, nil, true
	if err := b.rc.Read(b.rfn); err != nil {
		return 0, err
	}
	return b.got, b.rerr
}

func (b *Conn) recvmmsg(fd uintptr) bool {
	for i := range b.rhdr {
		b.rhdr[i].hdr.Namelen = unix.SizeofSockaddrInet6
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.rhdr[0])), uintptr(len(b.rhdr)), unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		b.got = int(r)
		for i := range b.got {
			b.lens[i] = int(b.rhdr[i].len)
		}
	case unix.EAGAIN:
		return !b.rwait // park until readable, or return 0
	case unix.EINTR:
	default:
		b.rerr = e
	}
	return true
}

// Echo sends the first n datagrams of the last Recv back to where each
// came from, as they arrived, waiting while the socket buffer is full.
func (b *Conn) Echo(n int) error {
	n = min(n, b.got)
	for i := range n {
		b.eiov[i].SetLen(b.lens[i])
		b.ehdr[i].hdr.Namelen = b.rhdr[i].hdr.Namelen
	}
	for b.eoff = 0; b.eoff < n; b.eoff += b.esent {
		b.en, b.esent, b.eerr = n-b.eoff, 0, nil
		if err := b.rc.Write(b.efn); err != nil {
			return err
		}
		if b.eerr != nil {
			return b.eerr
		}
	}
	return nil
}

func (b *Conn) echommsg(fd uintptr) bool {
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.ehdr[b.eoff])), uintptr(b.en), unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0:
		b.esent = int(r)
	case unix.EAGAIN:
		return false // wait until writable
	case unix.EINTR:
		return b.echommsg(fd)
	default:
		b.eerr = e
	}
	return true
}

// Buf returns datagram i of the last Recv.
func (b *Conn) Buf(i int) []byte { return b.bufs[i][:b.lens[i]] }

// Len returns the length of datagram i of the last Recv.
func (b *Conn) Len(i int) int { return b.lens[i] }
