package test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// TestDaemonHostileDoorbells: an application cannot stall its daemon
// through the descriptors the daemon gave it. A hostile one attaches by
// hand (the control socket's protocol, no softfabric library), takes a
// UD QPN, and turns its doorbells against the daemon: the one the daemon
// reads made blocking and empty, the one the daemon writes made blocking
// and full, what flags the daemon shares with its open file descriptions
// changed, and its ring's sleeping flag set over and over, so that the
// daemon rings it for every frame. A peer floods that QPN with datagrams
// meanwhile, and another application's writes through the same worker
// must all complete.
func TestDaemonHostileDoorbells(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	good, peer := open(t, p.A), open(t, p.B)
	ends := []*end{good, peer}
	qg, _ := rcPair(t, good, peer, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16))

	const hostileQPN, qkey = 0x7777, 0x11
	fds := attachRaw(t, p.A, hostileQPN)
	region, err := mapRegion(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(region)
	unjam := turnDoorbells(t, fds[1], fds[2])
	// The to-app ring's sleeping flag (shmlink's layout: the to-app ring's
	// control lines from 64, the flag on the third), set again and again.
	sleeping := (*atomic.Uint32)(unsafe.Pointer(&region[64+128]))
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			sleeping.Store(1)
			time.Sleep(20 * time.Microsecond)
		}
	})
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
		unjam() // a daemon stuck on them would never stop
	})

	// The peer's datagrams to the hostile QPN, one before each write.
	qd, ah := udTo(t, peer, 0, qkey, good.gid(), hostileQPN)
	start := time.Now()
	const writes = 200
	for i := range writes {
		for range 4 {
			if err := qd.PostSend(&verbs.SendWR{Op: verbs.OpSend, Flags: verbs.Signaled, Dest: ah, SGL: sge(peer.buf, 0, 64)}); err != nil {
				t.Fatal(err)
			}
		}
		wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(good.buf, 0, 64), RemoteAddr: peer.buf.Addr() + 4096, RKey: peer.buf.RKey(), ID: uint64(i)}
		if err := qg.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		timer := time.AfterFunc(5*time.Second, func() {
			select {
			case <-done:
			default:
				// The worker is stuck: free it, so that the test can end.
				unjam()
			}
		})
		c := pollAll(t, ends, good.scq, 1)
		close(done)
		timer.Stop()
		if c[0].Status != verbs.Success {
			t.Fatalf("write %d: %v", i, c[0].Status)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("write %d done %v after the first: the daemon's worker was stuck on the hostile application's doorbells", i, d)
		}
		for peer.scq.Poll(make([]verbs.Completion, 8)) > 0 {
		}
	}
	// The daemon did deliver to the hostile application's ring, and rang
	// it (the to-app producer index, at 64).
	prod := (*atomic.Uint32)(unsafe.Pointer(&region[64])).Load()
	t.Logf("%d writes in %v beside the hostile application; the daemon put %d frames on its ring", writes, time.Since(start), prod)
	if prod == 0 {
		t.Fatal("no datagram reached the hostile application's ring: the test tested nothing")
	}
}

// attachRaw attaches to h's daemon by hand, as an application without
// the softfabric library could, takes QPN qpn, and returns the
// descriptors of its first queue's region: the memfd and the two
// doorbells. The connection stays open until the test ends.
func attachRaw(t *testing.T, h *netnstest.Host, qpn uint32) [3]int {
	t.Helper()
	var (
		c   *net.UnixConn
		fds []int
	)
	if err := h.Do(func() error {
		ns, err := ctrl.NetNSID()
		if err != nil {
			return err
		}
		if c, err = daemonapi.Dial(ctrl.RunDir(ns, h.Iface)); err != nil {
			return err
		}
		rep, got, err := daemonapi.Call(c, daemonapi.Request{Op: daemonapi.OpAttach, Version: daemonapi.Version, Name: "hostile"})
		fds = got
		if err == nil {
			err = rep.Error()
		}
		if err == nil && len(fds) < 3 {
			err = fmt.Errorf("%d descriptors", len(fds))
		}
		if err != nil {
			return fmt.Errorf("attach: %w", err)
		}
		rep, _, err = daemonapi.Call(c, daemonapi.Request{Op: daemonapi.OpSetQP, QPN: qpn})
		if err == nil {
			err = rep.Error()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	return [3]int{fds[0], fds[1], fds[2]}
}

// mapRegion maps a shared region whole, its size read from its header.
func mapRegion(fd int) ([]byte, error) {
	var hdr [32]byte
	if _, err := unix.Pread(fd, hdr[:], 0); err != nil {
		return nil, err
	}
	return unix.Mmap(fd, 0, int(binary.LittleEndian.Uint64(hdr[24:])), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// turnDoorbells does to an application's doorbells (its own, which the
// daemon writes, and the daemon's, which the daemon reads) what could
// block the daemon, whatever kind of descriptor they are: an eventfd is
// left blocking and empty where the daemon reads, blocking and full where
// it writes; a pipe is filled from a writer of its own. It returns a
// function that undoes enough of it for a stuck daemon to go on.
func turnDoorbells(t *testing.T, mine, daemons int) (unjam func()) {
	t.Helper()
	var extra []int
	switch kind(t, daemons) {
	case "eventfd":
		var b [8]byte
		_, _ = unix.Read(daemons, b[:]) // empty: a read of it blocks
	case "pipe":
		fillPipe(t, daemons)
	}
	switch kind(t, mine) {
	case "eventfd":
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], 1<<64-2) // full: a write of 1 blocks
		if _, err := unix.Write(mine, b[:]); err != nil {
			t.Fatal(err)
		}
	case "pipe":
		// Only a read end: open a writer of its own and fill it.
		w, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", mine), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		extra = append(extra, w)
		fillPipe(t, w)
	}
	for _, fd := range append([]int{mine, daemons}, extra...) {
		if err := unix.SetNonblock(fd, false); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, fd := range append([]int{mine, daemons}, extra...) {
				_ = unix.SetNonblock(fd, true)
			}
			var b [65536]byte
			_, _ = unix.Read(mine, b[:])
			if kind(t, daemons) == "eventfd" {
				binary.NativeEndian.PutUint64(b[:], 1)
				_, _ = unix.Write(daemons, b[:8])
			}
			for _, fd := range extra {
				unix.Close(fd)
			}
		})
	}
}

// kind is what sort of descriptor fd is: "eventfd", "pipe", or another.
func kind(t *testing.T, fd int) string {
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(target, "eventfd"):
		return "eventfd"
	case strings.HasPrefix(target, "pipe:"):
		return "pipe"
	}
	return target
}

// fillPipe writes to pipe fd (non-blocking) until it is full.
func fillPipe(t *testing.T, fd int) {
	t.Helper()
	b := make([]byte, 4096)
	for {
		if _, err := unix.Write(fd, b); errors.Is(err, unix.EAGAIN) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}
