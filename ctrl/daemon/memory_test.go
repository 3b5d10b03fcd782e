package daemon

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/internal/memfdtest"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
)

var page = os.Getpagesize()

// dup gives addMemory a descriptor of its own to close.
func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const sealed = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// TestCheckMemory: what add_memory may hand the daemon to map. A memfd
// that can shrink is refused (the application could truncate it under
// the daemon's writes, which would fault), as is anything that is not a
// memfd, and a size the file does not hold or that is not whole pages.
func TestCheckMemory(t *testing.T) {
	file, pipe := memfdtest.Others(t, page)
	for _, c := range []struct {
		what string
		fd   int
		size uint64
		ok   bool
	}{
		{"sealed memfd", memfdtest.New(t, "softfabric-test", 2*page, sealed), uint64(2 * page), true},
		{"sealed memfd, a page of two", memfdtest.New(t, "softfabric-test", 2*page, sealed), uint64(page), true},
		{"fully sealed memfd", memfdtest.New(t, "softfabric-test", page, sealed|unix.F_SEAL_SEAL), uint64(page), true},
		{"unsealed memfd", memfdtest.New(t, "softfabric-test", page, 0), uint64(page), false},
		{"memfd without sealing", memfdtest.New(t, "softfabric-test", page, -1), uint64(page), false},
		{"memfd sealed against growth only", memfdtest.New(t, "softfabric-test", page, unix.F_SEAL_GROW|unix.F_SEAL_SEAL), uint64(page), false},
		{"memfd sealed against shrinking only", memfdtest.New(t, "softfabric-test", page, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL), uint64(page), false},
		{"regular file", file, uint64(page), false},
		{"pipe", pipe, uint64(page), false},
		{"size past the file", memfdtest.New(t, "softfabric-test", page, sealed), uint64(2 * page), false},
		{"size 0", memfdtest.New(t, "softfabric-test", page, sealed), 0, false},
		{"size not whole pages", memfdtest.New(t, "softfabric-test", 2*page, sealed), uint64(page + 1), false},
	} {
		err := checkMemory(c.fd, c.size)
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
		if !c.ok && !errors.Is(err, daemonapi.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.what, err)
		}
	}
}

// TestMemoryBookkeeping: regions by the application's IDs, published to
// the workers copy on write, counted in stats, within the limits, and all
// unmapped when the application goes.
func TestMemoryBookkeeping(t *testing.T) {
	d := &Daemon{}
	a := &app{}
	a.mem.Store(&map[uint32][]byte{})
	fd := memfdtest.New(t, "softfabric-test", 4*page, sealed)
	isInvalid := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, daemonapi.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	if err := d.addMemory(a, 1, uint64(4*page), []int{dup(t, fd)}); err != nil {
		t.Fatal(err)
	}
	first := a.mem.Load()
	b := (*first)[1]
	if len(b) != 4*page {
		t.Fatalf("region 1 maps %d bytes, want %d", len(b), 4*page)
	}
	// The daemon's mapping is the application's memory.
	mine, err := unix.Mmap(fd, 0, 4*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mine)
	mine[page+5] = 0x5a
	if b[page+5] != 0x5a {
		t.Fatal("the daemon's mapping does not see the application's write")
	}

	isInvalid("a region ID in use", d.addMemory(a, 1, uint64(page), []int{dup(t, fd)}))
	isInvalid("no descriptor", d.addMemory(a, 2, uint64(page), nil))
	isInvalid("two descriptors", d.addMemory(a, 2, uint64(page), []int{dup(t, fd), dup(t, fd)}))
	// A sparse memfd big enough that only the limit refuses it.
	big := memfdtest.New(t, "softfabric-test", maxMemBytes, sealed)
	isInvalid("past the byte limit", d.addMemory(a, 2, maxMemBytes, []int{dup(t, big)}))
	isInvalid("an unknown region", d.deleteMemory(a, 2))
	if err := d.addMemory(a, 2, uint64(page), []int{dup(t, fd)}); err != nil {
		t.Fatal(err)
	}
	if n := len(*first); n != 1 {
		t.Fatalf("a published map changed: %d regions in it", n)
	}
	if m := *a.mem.Load(); len(m) != 2 || memBytes(m) != uint64(5*page) {
		t.Fatalf("after two regions: %d regions, %d bytes", len(m), memBytes(m))
	}
	if err := d.deleteMemory(a, 1); err != nil {
		t.Fatal(err)
	}
	isInvalid("deleting twice", d.deleteMemory(a, 1))
	if m := *a.mem.Load(); len(m) != 1 || memBytes(m) != uint64(page) {
		t.Fatalf("after deleting one: %d regions, %d bytes", len(m), memBytes(m))
	}

	// The region limit: one more than maxMemRegions is refused.
	for id := uint32(3); len(*a.mem.Load()) < maxMemRegions; id++ {
		if err := d.addMemory(a, id, uint64(page), []int{dup(t, fd)}); err != nil {
			t.Fatalf("region %d: %v", id, err)
		}
	}
	isInvalid("a region past the limit", d.addMemory(a, 1<<20, uint64(page), []int{dup(t, fd)}))
	a.release()
	if n := len(*a.mem.Load()); n != 0 {
		t.Fatalf("%d regions after release", n)
	}
	a.release() // twice: nothing left to unmap
}

// TestDaemonLimits: past Config.MaxApps applications, an attachment is
// refused with an error that says why; past Config.MaxRegions shared
// memory regions for all applications together, a region is refused
// whichever application asks, and accepted again once another is gone.
func TestDaemonLimits(t *testing.T) {
	d := &Daemon{cfg: Config{MaxApps: 2, MaxRegions: 3}, gid: -1}
	d.apps.Store(&[]*app{})
	var apps []*app
	for i := range 3 {
		c, peer, err := daemonapi.SocketPair()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		defer peer.Close()
		a, err := d.attach(c, &unix.Ucred{Pid: int32(os.Getpid())}, daemonapi.Request{Op: daemonapi.OpAttach, Version: daemonapi.Version, Name: "limits"})
		if i < 2 {
			if err != nil {
				t.Fatalf("attachment %d: %v", i, err)
			}
			apps = append(apps, a)
			continue
		}
		if !errors.Is(err, daemonapi.ErrInvalid) || !strings.Contains(err.Error(), "2 applications") {
			t.Fatalf("a third attachment past MaxApps 2: %v", err)
		}
	}
	if n := len(*d.apps.Load()); n != 2 {
		t.Fatalf("%d applications attached", n)
	}
	fd := memfdtest.New(t, "softfabric-test", page, sealed)
	for i, a := range []*app{apps[0], apps[0], apps[1]} {
		if err := d.addMemory(a, uint32(10+i), uint64(page), []int{dup(t, fd)}); err != nil {
			t.Fatalf("region %d: %v", i, err)
		}
	}
	err := d.addMemory(apps[1], 20, uint64(page), []int{dup(t, fd)})
	if !errors.Is(err, daemonapi.ErrInvalid) || !strings.Contains(err.Error(), "3 regions") {
		t.Fatalf("a fourth region past MaxRegions 3: %v", err)
	}
	if err := d.deleteMemory(apps[0], 10); err != nil {
		t.Fatal(err)
	}
	if err := d.addMemory(apps[1], 20, uint64(page), []int{dup(t, fd)}); err != nil {
		t.Fatalf("a region after another was deleted: %v", err)
	}
	for _, a := range apps {
		a.release()
	}
	if mapLimit < 1000 {
		t.Errorf("the daemon would map at most %d regions (half of vm.max_map_count)", mapLimit)
	}
}
