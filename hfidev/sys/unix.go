//go:build linux

package sys

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/internal/ppoll"
)

// Unix is the real seam: system calls on an hfi1 character device.
type Unix struct{}

var _ Sys = Unix{}

// Open implements Sys with open(2), adding O_CLOEXEC.
func (Unix) Open(path string, flags int) (int, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// Close implements Sys.
func (Unix) Close(fd int) error { return unix.Close(fd) }

// Ioctl implements Sys. The argument is always passed by pointer, as every
// hfi1 ioctl takes one.
func (Unix) Ioctl(fd int, cmd uint32, arg []byte) error {
	if len(arg) < abi.IOCSize(cmd) {
		return unix.EFAULT
	}
	var p unsafe.Pointer
	if len(arg) > 0 {
		p = unsafe.Pointer(&arg[0])
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(p))
	runtime.KeepAlive(arg)
	if e != 0 {
		return e
	}
	return nil
}

// Mmap implements Sys with mmap(2).
func (Unix) Mmap(fd int, offset int64, length, prot, flags int) (Region, error) {
	b, err := unix.Mmap(fd, offset, length, prot, flags)
	if err != nil {
		return nil, err
	}
	m, err := NewMemRegion(b) // mmap returns page-aligned memory
	if err != nil {
		_ = unix.Munmap(b)
		return nil, err
	}
	// The writable hfi1 mappings are exactly the device apertures (PIO
	// buffers, user registers); everything else is read-only memory.
	if prot&unix.PROT_WRITE != 0 {
		return &ioRegion{MemRegion: *m}, nil
	}
	return m, nil
}

// Munmap implements Sys.
func (Unix) Munmap(r Region) error {
	switch m := r.(type) {
	case *MemRegion:
		return unix.Munmap(m.b)
	case *ioRegion:
		return unix.Munmap(m.b)
	}
	return unix.EINVAL
}

// maxStackIov bounds the iovecs Writev builds without allocating: an SDMA
// request is at most 1 header + 8 data + 1 TID list.
const maxStackIov = 16

// Writev implements Sys with writev(2), without allocating for up to
// maxStackIov segments.
func (Unix) Writev(fd int, iov [][]byte) (int, error) {
	var stack [maxStackIov]unix.Iovec
	vecs := stack[:0]
	if len(iov) > maxStackIov {
		vecs = make([]unix.Iovec, 0, len(iov))
	}
	for _, b := range iov {
		var v unix.Iovec
		if len(b) > 0 {
			v.Base = &b[0]
			v.SetLen(len(b))
		}
		vecs = append(vecs, v)
	}
	var p unsafe.Pointer
	if len(vecs) > 0 {
		p = unsafe.Pointer(&vecs[0])
	}
	n, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(p), uintptr(len(vecs)))
	runtime.KeepAlive(iov)
	runtime.KeepAlive(vecs)
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// eventWaker is the real Waker: a non-blocking eventfd.
type eventWaker struct {
	fd    int
	one   [8]byte
	drain [8]byte
}

// NewWaker implements Sys with eventfd(2).
func (Unix) NewWaker() (Waker, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &eventWaker{fd: fd}
	w.one[0] = 1 // an eventfd counter is host-endian: little-endian here
	return w, nil
}

// Wake adds 1 to the eventfd's counter; it cannot block (EFD_NONBLOCK)
// and fails only if the counter is about to overflow, when a Poll is
// woken anyway.
func (w *eventWaker) Wake() { _, _ = unix.Write(w.fd, w.one[:]) }

// Close implements Waker.
func (w *eventWaker) Close() error { return unix.Close(w.fd) }

// Poll implements Sys with ppoll(2) on fd and, when w is given, its
// eventfd, retrying on EINTR (the Go runtime's preemption signals) with
// the time left. A woken eventfd is read back to zero. Poll does not
// allocate.
func (Unix) Poll(fd int, w Waker, timeout time.Duration) (int16, bool, error) {
	fds := [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n := 1
	var ew *eventWaker
	if w != nil {
		var ok bool
		if ew, ok = w.(*eventWaker); !ok {
			return 0, false, unix.EINVAL
		}
		fds[1] = unix.PollFd{Fd: int32(ew.fd), Events: unix.POLLIN}
		n = 2
	}
	if _, err := ppoll.Wait(fds[:n], timeout); err != nil {
		return 0, false, err
	}
	woken := false
	if ew != nil && fds[1].Revents&unix.POLLIN != 0 {
		_, _ = unix.Read(ew.fd, ew.drain[:])
		woken = true
	}
	return fds[0].Revents, woken, nil
}
