//go:build linux

package sys

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
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
