// Package sys is the system-call seam under hfidev: open, ioctl, mmap,
// writev and close on an hfi1 character device, and the mapped regions they
// return, and poll(2) on the device. Unix implements it with real system
// calls on /dev/hfi1_N; the software model (hfidev/model) implements it
// with plain memory and doorbells, so the same set-up and data-path code
// runs on both.
package sys

import "time"

// Sys is the seam. Errors are syscall.Errno values (unix.EINVAL, …), bare,
// so that callers wrap them and match them with errors.Is on the real
// device and on the model alike.
type Sys interface {
	// Open opens a device node; flags are open(2)'s (O_RDWR, O_CLOEXEC is
	// added by the implementation where it applies).
	Open(path string, flags int) (fd int, err error)
	// Close closes fd; a real context is released by the driver then.
	Close(fd int) error
	// Ioctl issues cmd with arg as the byte-exact C structure the command
	// points to (nil for commands without an argument). arg must hold at
	// least _IOC_SIZE(cmd) bytes; a shorter one fails with EFAULT before
	// anything reaches the device, so a bad call cannot scribble memory.
	Ioctl(fd int, cmd uint32, arg []byte) error
	// Mmap maps length bytes of fd at offset (an mmap token without its
	// in-page offset) with prot and flags as mmap(2) takes them.
	Mmap(fd int, offset int64, length, prot, flags int) (Region, error)
	// Munmap unmaps a region Mmap returned.
	Munmap(r Region) error
	// Writev submits SDMA requests; it returns what writev(2) returns (for
	// hfi1, the number of requests accepted).
	Writev(fd int, iov [][]byte) (int, error)
	// NewWaker returns a Waker for Poll: on the real seam an eventfd
	// polled beside the device, as OPX's progress thread polls one beside
	// the context's file and PSM's receive thread a pipe.
	NewWaker() (Waker, error)
	// Poll waits for fd to become readable (poll(2) with POLLIN asked
	// for), for w to be woken (w may be nil), or for timeout to pass
	// (negative: no limit; 0: look once). It returns fd's revents as
	// poll(2) reports them (POLLIN; POLLERR, POLLHUP or POLLNVAL without
	// being asked; 0 when none) and whether w was woken, which the call
	// consumes; w must come from this Sys's NewWaker (EINVAL otherwise).
	// Interrupted calls (EINTR) are retried with the time left.
	Poll(fd int, w Waker, timeout time.Duration) (revents int16, woken bool, err error)
}

// Waker ends a Poll in progress, or the next one, from any goroutine.
// Wakes before a Poll collapse into one.
type Waker interface {
	Wake()
	// Close releases the waker (the eventfd); Poll must not be given it
	// afterwards.
	Close() error
}

// Region is a mapped device region. Word accessors are 64-bit atomic loads
// and stores, as the chip and the driver exchange words; offsets must be
// 8-byte aligned and in range, or they panic as an index out of range does.
type Region interface {
	// Len is the mapping length.
	Len() int
	// Load64 reads the little-endian word at off.
	Load64(off int) uint64
	// Store64 writes the word at off. On the real device's writable
	// mappings (PIO, user registers) it is a plain store followed by a
	// fence; in the model, PIO stores are the doorbell.
	Store64(off int, v uint64)
	// StoreBlock writes one 64-byte PIO block at off (one write-combined
	// burst on the real device, fenced; words in ascending order in the
	// model).
	StoreBlock(off int, blk *[8]uint64)
	// Bytes is the region as plain memory, for regions that are memory
	// (RcvHdrQ, eager buffers, completion ring…). It is nil where the
	// region is a device aperture that must only be stored to (the model's
	// PIO buffers); on real hardware never read a write-only mapping.
	Bytes() []byte
}
