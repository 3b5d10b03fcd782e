package device

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/link/shmlink"
)

// Attached reports whether the device is attached to a daemon (Attach):
// AllocMemory's memory is then shared with it.
func (d *Device) Attached() bool {
	_, ok := d.opts.Registrar.(*client)
	return ok
}

// AllocMemory allocates n bytes of page-aligned memory outside the Go
// heap, for buffers to register. On a device attached to a daemon it is a
// memfd the daemon maps too (daemonapi.OpAddMemory), sealed so that it
// can neither shrink nor grow: the daemon can place received payloads
// straight into it. In process it is anonymous memory. free unmaps it
// (the daemon's mapping first, while the daemon is there); calling it
// again does nothing. Errors wrap ErrGone when the daemon is gone, and
// daemonapi.ErrInvalid when it refuses (a limit reached).
func (d *Device) AllocMemory(n int) (mem []byte, free func() error, err error) {
	if n <= 0 {
		return nil, nil, fmt.Errorf("allocating memory: %w: %d bytes", unix.EINVAL, n)
	}
	if cl, ok := d.opts.Registrar.(*client); ok {
		return cl.allocMemory(n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	return b, once(func() error { return unix.Munmap(b) }), nil
}

// memName names the memfds of AllocMemory (/proc/PID/maps shows them as
// /memfd:softfabric-mem).
const memName = "softfabric-mem"

// allocMemory allocates n bytes (rounded up to whole pages) in a sealed
// memfd, has the daemon map it, and tells the rings' ends.
func (cl *client) allocMemory(n int) ([]byte, func() error, error) {
	page := os.Getpagesize()
	size := (n + page - 1) &^ (page - 1)
	fd, err := unix.MemfdCreate(memName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes: memfd_create: %w", n, err)
	}
	// Closed once the daemon answered: its mapping and ours keep the
	// memory.
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes: ftruncate: %w", n, err)
	}
	// Shrinking would make the daemon's writes fault (SIGBUS): the daemon
	// refuses a memfd not sealed so.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes: sealing the memfd: %w", n, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	cl.memMu.Lock()
	cl.memLast++
	id := cl.memLast
	cl.memMu.Unlock()
	if err := cl.call(daemonapi.Request{Op: daemonapi.OpAddMemory, Region: id, Size: uint64(size)}, fd); err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	cl.memMu.Lock()
	cl.mem = append(cl.mem, shmlink.MemRegion{ID: id, Mem: mem})
	cl.publishMem()
	cl.memMu.Unlock()
	return mem[:n:n], once(func() error { return cl.freeMemory(id, mem) }), nil
}

// freeMemory takes region id back: the rings' ends stop announcing it,
// the daemon unmaps it, then this process does.
func (cl *client) freeMemory(id uint32, mem []byte) error {
	cl.memMu.Lock()
	cl.mem = slices.DeleteFunc(cl.mem, func(r shmlink.MemRegion) bool { return r.ID == id })
	cl.publishMem()
	cl.memMu.Unlock()
	err := cl.call(daemonapi.Request{Op: daemonapi.OpDeleteMemory, Region: id})
	if errors.Is(err, ErrGone) {
		err = nil // its mapping went with it, or goes as it lets this process go
	}
	if uerr := unix.Munmap(mem); err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("freeing shared memory region %d: %w", id, err)
	}
	return nil
}

// publishMem tells every ring's end of the regions the daemon maps
// (cl.memMu held).
func (cl *client) publishMem() {
	for _, r := range cl.regions {
		r.AppEnd().SetMemRegions(cl.mem)
	}
}

// once returns a function that calls f the first time and returns its
// result then, and nil after.
func once(f func() error) func() error {
	var o sync.Once
	return func() error {
		var err error
		o.Do(func() { err = f() })
		return err
	}
}
