package device

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
)

// mapped reports whether b's first page is mapped in this process.
func mapped(b []byte) bool {
	vec := make([]byte, 1)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), 1, uintptr(unsafe.Pointer(&vec[0])))
	return e == 0
}

// TestAllocMemoryInProcess: without a daemon, AllocMemory is anonymous
// memory, freed once.
func TestAllocMemoryInProcess(t *testing.T) {
	d, _ := twoDevices(t, 1)
	if d.Attached() {
		t.Fatal("an in-process device says it is attached")
	}
	b, free, err := d.AllocMemory(10000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 10000 || uintptr(unsafe.Pointer(&b[0]))%uintptr(os.Getpagesize()) != 0 {
		t.Fatalf("%d bytes at %p", len(b), &b[0])
	}
	for i := range b {
		b[i] = byte(i)
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if mapped(b) {
		t.Fatal("still mapped after free")
	}
	if err := free(); err != nil {
		t.Fatalf("free twice: %v", err)
	}
	if _, _, err := d.AllocMemory(0); err == nil {
		t.Fatal("allocated 0 bytes")
	}
}

// fakeDaemon answers an attached client's memory requests as the daemon
// would, keeping what it was sent: the descriptors' seals and sizes.
type fakeDaemon struct {
	c       *net.UnixConn
	reqs    chan daemonapi.Request
	seals   chan int
	refuse  atomic.Bool // refuse add_memory
	regions map[uint32]bool
}

func (f *fakeDaemon) serve() {
	for {
		var req daemonapi.Request
		fds, err := daemonapi.Read(f.c, &req)
		if err != nil {
			return
		}
		var rep daemonapi.Reply
		switch req.Op {
		case daemonapi.OpAddMemory:
			seals := -1
			if len(fds) == 1 {
				seals, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_GET_SEALS, 0)
				var st unix.Stat_t
				if unix.Fstat(fds[0], &st) != nil || uint64(st.Size) != req.Size {
					seals = -1
				}
			}
			f.seals <- seals
			if f.refuse.Load() {
				rep = daemonapi.Fail(fmt.Errorf("%w: refused", daemonapi.ErrInvalid))
			} else {
				f.regions[req.Region] = true
			}
		case daemonapi.OpDeleteMemory:
			if !f.regions[req.Region] {
				rep = daemonapi.Fail(daemonapi.ErrInvalid)
			}
			delete(f.regions, req.Region)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		f.reqs <- req
		if err := daemonapi.Write(f.c, rep, nil); err != nil {
			return
		}
	}
}

// attachedToFake returns a device whose client talks to a fake daemon.
func attachedToFake(t *testing.T) (*Device, *fakeDaemon, *client) {
	t.Helper()
	c0, c1, err := daemonapi.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	cl := &client{c: c0, replies: make(chan reply, 1), gone: make(chan struct{}), lost: make(chan struct{})}
	f := &fakeDaemon{c: c1, reqs: make(chan daemonapi.Request, 16), seals: make(chan int, 16), regions: map[uint32]bool{}}
	go cl.read()
	go f.serve()
	x, _ := memlink.NewPair(memlink.Config{})
	d := NewWorkers([]link.Link{x}, Options{Name: "x", MTU: 1500, Registrar: cl})
	d.gone = cl.lost
	d.closers = append(d.closers, cl.close)
	t.Cleanup(func() { d.Close(); f.c.Close() })
	return d, f, cl
}

// TestAllocMemoryAttached: attached, AllocMemory hands the daemon a memfd
// sealed against resizing, of whole pages, under a new region ID each
// time; free has the daemon drop it, once; with the daemon gone, free
// only unmaps, and a refusal surfaces as daemonapi.ErrInvalid.
func TestAllocMemoryAttached(t *testing.T) {
	d, f, _ := attachedToFake(t)
	if !d.Attached() {
		t.Fatal("an attached device says it is not")
	}
	page := os.Getpagesize()
	var frees []func() error
	var mems [][]byte
	for i := range 2 {
		b, free, err := d.AllocMemory(page + 1)
		if err != nil {
			t.Fatal(err)
		}
		req := <-f.reqs
		if req.Op != daemonapi.OpAddMemory || req.Region != uint32(i+1) || req.Size != uint64(2*page) {
			t.Fatalf("allocation %d sent %+v, want add_memory of region %d, %d bytes", i, req, i+1, 2*page)
		}
		if s, want := <-f.seals, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL; s < 0 || s&want != want {
			t.Fatalf("allocation %d: the daemon got seals %#x, want %#x, of a memfd of the size announced", i, s, want)
		}
		if len(b) != page+1 {
			t.Fatalf("allocation %d: %d bytes", i, len(b))
		}
		b[page] = 1
		frees, mems = append(frees, free), append(mems, b)
	}
	if err := frees[0](); err != nil {
		t.Fatal(err)
	}
	if req := <-f.reqs; req.Op != daemonapi.OpDeleteMemory || req.Region != 1 {
		t.Fatalf("free sent %+v, want delete_memory of region 1", req)
	}
	if mapped(mems[0]) {
		t.Fatal("still mapped after free")
	}
	if err := frees[0](); err != nil {
		t.Fatalf("free twice: %v", err)
	}
	select {
	case req := <-f.reqs:
		t.Fatalf("the second free sent %+v", req)
	case <-time.After(20 * time.Millisecond):
	}

	f.refuse.Store(true)
	if _, _, err := d.AllocMemory(1); !errors.Is(err, daemonapi.ErrInvalid) {
		t.Fatalf("refused allocation: %v", err)
	}
	<-f.seals
	<-f.reqs

	// The daemon gone: free unmaps, allocation fails with ErrGone.
	f.c.Close()
	select {
	case <-d.Gone():
	case <-time.After(2 * time.Second):
		t.Fatal("the device did not see its daemon go")
	}
	if err := frees[1](); err != nil {
		t.Fatalf("free with the daemon gone: %v", err)
	}
	if mapped(mems[1]) {
		t.Fatal("still mapped after free with the daemon gone")
	}
	if _, _, err := d.AllocMemory(1); !errors.Is(err, ErrGone) {
		t.Fatalf("allocation with the daemon gone: %v", err)
	}
}
