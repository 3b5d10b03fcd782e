package daemon

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
)

// Limits on the memory one application shares with the daemon
// (daemonapi.OpAddMemory). Each region is a mapping of the daemon's, and
// the daemon's whole process has vm.max_map_count of them (65530 by
// default) and one address space for every application it serves: the
// limits keep one application from using them up for the others. The
// pages themselves are the application's (its memfds).
const (
	maxMemRegions = 1024
	maxMemBytes   = 64 << 30
)

// The daemon as a whole maps at most half of vm.max_map_count regions
// for its applications (each MR of an application using fabric's
// allocator is one): past the limit the kernel refuses the daemon's own
// mappings too, and the Go runtime dies when its heap cannot grow. An
// MPI job's 64 ranks with 1024 regions each would pass the default
// 65530; with the limit, the region past it is refused, with an error,
// and the daemon serves on. The rings (a mapping per application and
// queue), the Go runtime and the rest keep the other half.
const defaultMaxMapCount = 65530

// mapLimit is the most shared memory regions the daemon maps for all its
// applications together: half of vm.max_map_count.
var mapLimit = func() int {
	n := defaultMaxMapCount
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			n = v
		}
	}
	return n / 2
}()

// defaultMaxApps is how many applications a daemon serves at once unless
// Config.MaxApps says otherwise: each is polled on every pass of every
// worker, and has a ring mapping per queue.
const defaultMaxApps = 256

func (d *Daemon) maxApps() int {
	if d.cfg.MaxApps > 0 {
		return d.cfg.MaxApps
	}
	return defaultMaxApps
}

func (d *Daemon) regionLimit() int {
	if d.cfg.MaxRegions > 0 {
		return d.cfg.MaxRegions
	}
	return mapLimit
}

// regionsMapped is how many shared memory regions the daemon maps for
// the applications it serves (those going away may still hold some for
// a moment). d.mu held.
func (d *Daemon) regionsMapped() int {
	n := 0
	if apps := d.apps.Load(); apps != nil {
		for _, a := range *apps {
			n += len(*a.mem.Load())
		}
	}
	return n
}

// memOp adds or deletes one of a's shared memory regions; add_memory's
// descriptors are fds, which it closes.
func (d *Daemon) memOp(a *app, req daemonapi.Request, fds []int) error {
	if req.Op == daemonapi.OpDeleteMemory {
		closeFDs(fds)
		return d.deleteMemory(a, req.Region)
	}
	return d.addMemory(a, req.Region, req.Size, fds)
}

// addMemory maps the memfd of region id (fds, closed: the mapping keeps
// the memory) and publishes it to the workers.
func (d *Daemon) addMemory(a *app, id uint32, size uint64, fds []int) error {
	defer closeFDs(fds)
	if len(fds) != 1 {
		return fmt.Errorf("%w: add_memory carries %d descriptors, want 1", daemonapi.ErrInvalid, len(fds))
	}
	if err := checkMemory(fds[0], size); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := *a.mem.Load()
	if _, ok := cur[id]; ok {
		return fmt.Errorf("%w: memory region %d exists", daemonapi.ErrInvalid, id)
	}
	if len(cur) >= maxMemRegions {
		return fmt.Errorf("%w: memory region %d: the application has %d regions, the most it may", daemonapi.ErrInvalid, id, len(cur))
	}
	if n := d.regionsMapped(); n >= d.regionLimit() {
		return fmt.Errorf("%w: memory region %d: the daemon maps %d regions for its applications, the most it may (half of vm.max_map_count)", daemonapi.ErrInvalid, id, n)
	}
	if total := memBytes(cur); size > maxMemBytes-total {
		return fmt.Errorf("%w: memory region %d: %d bytes more than the %d shared would pass the limit of %d", daemonapi.ErrInvalid,
			id, size, total, uint64(maxMemBytes))
	}
	b, err := unix.Mmap(fds[0], 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("%w: mapping memory region %d: %v", daemonapi.ErrInvalid, id, err)
	}
	next := maps.Clone(cur)
	next[id] = b
	a.mem.Store(&next)
	return nil
}

// checkMemory checks what add_memory sent before the daemon maps it: a
// memfd that cannot shrink (the daemon's writes past its end would fault:
// SIGBUS) nor grow, holding size bytes, a whole number of pages.
func checkMemory(fd int, size uint64) error {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("%w: the memory's descriptor is not a memfd (F_GET_SEALS: %v)", daemonapi.ErrInvalid, err)
	}
	if need := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW; seals&need != need {
		return fmt.Errorf("%w: the memfd is not sealed against shrinking and growing (seals %#x)", daemonapi.ErrInvalid, seals)
	}
	if page := uint64(os.Getpagesize()); size == 0 || size%page != 0 {
		return fmt.Errorf("%w: memory of %d bytes, not a whole number of %d-byte pages", daemonapi.ErrInvalid, size, page)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: the memfd: %v", daemonapi.ErrInvalid, err)
	}
	if st.Size < 0 || uint64(st.Size) < size {
		return fmt.Errorf("%w: memory of %d bytes in a memfd of %d", daemonapi.ErrInvalid, size, st.Size)
	}
	return nil
}

// deleteMemory unpublishes region id of a and unmaps it once no worker
// can be writing into it.
func (d *Daemon) deleteMemory(a *app, id uint32) error {
	d.mu.Lock()
	cur := *a.mem.Load()
	b, ok := cur[id]
	if !ok {
		d.mu.Unlock()
		return fmt.Errorf("%w: no memory region %d", daemonapi.ErrInvalid, id)
	}
	next := maps.Clone(cur)
	delete(next, id)
	a.mem.Store(&next)
	d.mu.Unlock()
	d.quiesce()
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmapping memory region %d: %w", id, err)
	}
	return nil
}

// releaseMemory unmaps all of a's memory, once no worker holds it.
func (a *app) releaseMemory() {
	old := a.mem.Swap(&map[uint32][]byte{})
	if old == nil {
		return
	}
	for _, b := range *old {
		_ = unix.Munmap(b)
	}
}

// memBytes is the size of the regions of m.
func memBytes(m map[uint32][]byte) uint64 {
	var n uint64
	for _, b := range m {
		n += uint64(len(b))
	}
	return n
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
