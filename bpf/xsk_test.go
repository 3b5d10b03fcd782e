package bpf

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A bare AF_XDP socket for the tests, so they need nothing from
// dataplane/xsk: a UMEM and rings exist in the kernel but are never mapped
// or filled, so frames redirected to the socket are dropped there and show
// up in its statistics as drops for want of fill ring entries.

const (
	xskFrames    = 16
	xskFrameSize = 4096
)

// xskSocket returns an AF_XDP socket bound in copy mode to queue of the
// interface ifindex (in the calling thread's namespace), closed when the
// test ends. It returns errors rather than failing the test, being called
// on the other goroutine of netnstest.Host.Do.
func xskSocket(t testing.TB, ifindex, queue int) (int, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("af_xdp socket: %w", err)
	}
	umem, err := unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	t.Cleanup(func() {
		unix.Close(fd)
		unix.Munmap(umem)
	})
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))), Len: uint64(len(umem)), Size: xskFrameSize}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		return -1, fmt.Errorf("XDP_UMEM_REG: %w", e)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskFrames); err != nil {
			return -1, fmt.Errorf("af_xdp ring %d: %w", opt, err)
		}
	}
	// Rebinding a queue right after a socket on it closed gives EBUSY for
	// a few hundred milliseconds: retry for up to a second.
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	err = unix.Bind(fd, sa)
	for deadline := time.Now().Add(time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); err = unix.Bind(fd, sa) {
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return -1, fmt.Errorf("binding af_xdp socket to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return fd, nil
}

// xskReceived returns how many frames reached the socket: with an empty
// fill ring every one is dropped, counted in rx_dropped (and, since 5.9,
// rx_fill_ring_empty_descs).
func xskReceived(t testing.TB, fd int) uint64 {
	t.Helper()
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		t.Fatalf("XDP_STATISTICS: %v", e)
	}
	return st.Rx_dropped
}
