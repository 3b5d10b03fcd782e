package xsk

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The socket options of AF_XDP take structs that golang.org/x/sys/unix has
// types for but no setsockopt/getsockopt wrappers; these are the raw calls.
// The Socket keeps its descriptor open while it makes them.

func setsockopt(fd int, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func getsockopt(fd int, opt int, p unsafe.Pointer, size uintptr) (uintptr, error) {
	l := uint32(size)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return 0, errno
	}
	return uintptr(l), nil
}

func setsockoptInt(fd int, opt int, v int) error {
	x := int32(v)
	return setsockopt(fd, opt, unsafe.Pointer(&x), 4)
}

func umemReg(fd int, mem []byte, frameSize int) error {
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))),
		Len:  uint64(len(mem)),
		Size: uint32(frameSize),
		// No UMEM headroom: the kernel still leaves XDP_PACKET_HEADROOM
		// in front of every received frame, which is all we need.
	}
	return setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

func mmapOffsets(fd int) (unix.XDPMmapOffsets, error) {
	var off unix.XDPMmapOffsets
	_, err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func statistics(fd int) (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	_, err := getsockopt(fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

func options(fd int) (uint32, error) {
	var o uint32
	_, err := getsockopt(fd, unix.XDP_OPTIONS, unsafe.Pointer(&o), 4)
	return o, err
}

// kick asks the kernel to process the tx ring: sendto with no data. In
// copy mode each call sends at most the socket's tx budget of frames.
func kick(fd int) syscall.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}

// wakeRx asks a driver that set the fill ring's need_wakeup flag to look at
// the fill ring again: recvfrom with no buffer.
func wakeRx(fd int) syscall.Errno {
	_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return errno
}
