package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/memfdtest"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// memName is what /proc/PID/maps calls the memory device.AllocMemory
// shares with the daemon (/memfd:softfabric-mem (deleted)).
const memName = "softfabric-mem"

// memfdMaps returns the mappings of process pid of a memfd named name,
// as [start, end) addresses.
func memfdMaps(t *testing.T, pid int, name string) [][2]uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]uint64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, " /memfd:"+name+" ") && !strings.HasSuffix(l, " /memfd:"+name) {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(l)[0], "-")
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", l)
		}
		out = append(out, [2]uint64{s, e})
	}
	return out
}

// memfdFDs counts the descriptors process pid holds of memfds named name.
func memfdFDs(t *testing.T, pid int, name string) int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "/memfd:"+name+" ") {
			n++
		}
	}
	return n
}

// appOf is what h's daemon says of the application with process pid (nil:
// not attached).
func appOf(t *testing.T, h *netnstest.Host, pid int) *daemonapi.AppStats {
	t.Helper()
	for _, a := range daemonAppStats(t, h) {
		if a.PID == pid {
			return &a
		}
	}
	return nil
}

// checkShared checks what h's daemon (process dpid) reports and maps of
// this process's shared memory: regions of bytes in all.
func checkShared(t *testing.T, h *netnstest.Host, dpid, regions int, bytes uint64) {
	t.Helper()
	a := appOf(t, h, os.Getpid())
	if a == nil {
		t.Fatal("this process is not attached")
	}
	if a.MemRegions != regions || a.MemBytes != bytes {
		t.Fatalf("the daemon counts %d shared regions of %d bytes, want %d of %d", a.MemRegions, a.MemBytes, regions, bytes)
	}
	var mapped uint64
	maps := memfdMaps(t, dpid, memName)
	for _, m := range maps {
		mapped += m[1] - m[0]
	}
	if len(maps) != regions || mapped != bytes {
		t.Fatalf("the daemon maps %d %s memfds of %d bytes, want %d of %d", len(maps), memName, mapped, regions, bytes)
	}
}

// TestDaemonSharedMemory: memory from device.AllocMemory on an attached
// device is shared with the daemon: the daemon maps it (what this process
// writes, the daemon's mapping holds, and the other way round), counts it
// in `status`, and unmaps it when it is freed. fabric reports it as
// MRShared on such a device, and its Domain.AllocMemory shares; in
// process there is no daemon and nothing shared.
func TestDaemonSharedMemory(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A)
	upInProcess(t, p.B)
	a := open(t, p.A)
	if !a.d.Attached() {
		t.Fatal("the device of a host with a daemon is not attached")
	}
	dpid := daemonStats(t, p.A).PID
	page := uint64(os.Getpagesize())
	checkShared(t, p.A, dpid, 0, 0)

	mem, free, err := a.d.AllocMemory(10000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = free() })
	size := (10000 + page - 1) / page * page
	fill(mem, 3)
	checkShared(t, p.A, dpid, 1, size)

	// The daemon's mapping is this memory, both ways.
	at := memfdMaps(t, dpid, memName)[0][0]
	dmem, err := os.OpenFile(filepath.Join("/proc", strconv.Itoa(dpid), "mem"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dmem.Close()
	got := make([]byte, len(mem))
	if _, err := dmem.ReadAt(got, int64(at)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, mem) {
		t.Fatal("the daemon's mapping does not hold what the application wrote")
	}
	mark := bytes.Repeat([]byte{0xa5}, 64)
	if _, err := dmem.WriteAt(mark, int64(at+page)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[page:page+64], mark) {
		t.Fatal("the application does not see what the daemon wrote into its mapping")
	}

	mem2, free2, err := a.d.AllocMemory(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	mem2[len(mem2)-1] = 1
	checkShared(t, p.A, dpid, 2, size+1<<20)
	if err := free2(); err != nil {
		t.Fatal(err)
	}
	checkShared(t, p.A, dpid, 1, size)
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if err := free(); err != nil {
		t.Fatalf("free twice: %v", err)
	}
	checkShared(t, p.A, dpid, 0, 0)
	if n := memfdFDs(t, dpid, memName); n != 0 {
		t.Fatalf("the daemon holds %d descriptors of shared memory", n)
	}

	// fabric on the daemon's device: MRShared, and its allocations shared.
	var infos []fabric.Info
	if err := p.A.Do(func() (err error) {
		infos, err = fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg, Domain: fabric.DomainAttr{Name: p.A.Iface}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if infos[0].Domain.MRMode&fabric.MRShared == 0 {
		t.Fatalf("GetInfo on a daemon's device: MR mode %#x, no MRShared", infos[0].Domain.MRMode)
	}
	fab, err := fabric.OpenFabric(&infos[0])
	if err != nil {
		t.Fatal(err)
	}
	defer fab.Close()
	var dom *fabric.Domain
	if err := p.A.Do(func() (err error) { dom, err = fab.Domain(&infos[0]); return err }); err != nil {
		t.Fatal(err)
	}
	defer dom.Close()
	if dom.Info().Domain.MRMode&fabric.MRShared == 0 {
		t.Fatalf("a domain on a daemon's device: MR mode %#x, no MRShared", dom.Info().Domain.MRMode)
	}
	mr, err := dom.AllocMemory(5000, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill(mr.Bytes(), 4)
	var fabApp *daemonapi.AppStats
	for _, x := range daemonAppStats(t, p.A) {
		if x.PID == os.Getpid() && x.MemRegions > 0 {
			fabApp = &x
		}
	}
	if fabApp == nil || fabApp.MemRegions != 1 || fabApp.MemBytes != 2*page {
		t.Fatalf("the domain's allocation of 5000 bytes: the daemon shows %+v", fabApp)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(memfdMaps(t, dpid, memName)); n != 0 {
		t.Fatalf("the daemon still maps %d regions after MR.Close", n)
	}

	// In process (B has no daemon): private memory, nothing shared, no
	// MRShared.
	b := open(t, p.B)
	if b.d.Attached() {
		t.Fatal("an in-process device says it is attached")
	}
	mem, free, err = b.d.AllocMemory(10000)
	if err != nil {
		t.Fatal(err)
	}
	fill(mem, 5)
	if n := len(memfdMaps(t, os.Getpid(), memName)); n != 0 {
		t.Fatalf("in process, %d memfd mappings", n)
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	if err := p.B.Do(func() (err error) {
		infos, err = fabric.GetInfo(context.Background(), &fabric.Hints{EPType: fabric.EPMsg, Domain: fabric.DomainAttr{Name: p.B.Iface}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if infos[0].Domain.MRMode&fabric.MRShared != 0 {
		t.Fatalf("GetInfo on a device without a daemon: MR mode %#x has MRShared", infos[0].Domain.MRMode)
	}
}

// rawConn is a control connection to h's daemon, attached unless told
// not to, as device.Attach attaches; the rings' descriptors are closed.
func rawConn(t *testing.T, h *netnstest.Host, attach bool) *net.UnixConn {
	t.Helper()
	var runDir string
	if err := h.Do(func() error {
		ns, err := ctrl.NetNSID()
		runDir = ctrl.RunDir(ns, h.Iface)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, err := daemonapi.Dial(runDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if attach {
		_, fds, err := daemonapi.Call(c, daemonapi.Request{Op: daemonapi.OpAttach, Version: daemonapi.Version, Name: "memtest"})
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	return c
}

// memCall sends a memory request with fds over c and returns the
// daemon's error.
func memCall(t *testing.T, c *net.UnixConn, op string, id uint32, size uint64, fds ...int) error {
	t.Helper()
	if err := daemonapi.Write(c, daemonapi.Request{Op: op, Region: id, Size: size}, fds); err != nil {
		t.Fatal(err)
	}
	var r daemonapi.Reply
	got, err := daemonapi.Read(c, &r)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range got {
		unix.Close(fd)
	}
	if r.Error() != nil && r.Code != daemonapi.CodeInvalid {
		t.Errorf("%s of region %d: code %q", op, id, r.Code)
	}
	return r.Error()
}

// TestDaemonRefusesBadMemory: the daemon maps only a memfd that cannot
// shrink (an application that truncated memory under the daemon's writes
// would crash it with SIGBUS) nor grow, of at least the size announced,
// in whole pages, under an ID the application does not use yet; it
// deletes only a region it has. Each refusal is daemonapi.ErrInvalid,
// leaves nothing mapped or open in the daemon, and the connection
// usable.
func TestDaemonRefusesBadMemory(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A)
	dpid := daemonStats(t, p.A).PID
	page := os.Getpagesize()
	const sealed = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW
	file, pipe := memfdtest.Others(t, page)

	// Before attach, nothing.
	if err := memCall(t, rawConn(t, p.A, false), daemonapi.OpAddMemory, 1, uint64(page), memfdtest.New(t, "softfabric-memtest", page, sealed)); !errors.Is(err, daemonapi.ErrInvalid) {
		t.Fatalf("add_memory before attach: %v", err)
	}

	c := rawConn(t, p.A, true)
	for _, x := range []struct {
		what string
		size uint64
		fds  []int
	}{
		{"an unsealed memfd", uint64(page), []int{memfdtest.New(t, "softfabric-memtest", page, 0)}},
		{"a memfd that does not allow sealing", uint64(page), []int{memfdtest.New(t, "softfabric-memtest", page, -1)}},
		{"a memfd sealed against growth, not shrinking", uint64(page), []int{memfdtest.New(t, "softfabric-memtest", page, unix.F_SEAL_GROW|unix.F_SEAL_SEAL)}},
		{"a memfd sealed against shrinking, not growth", uint64(page), []int{memfdtest.New(t, "softfabric-memtest", page, unix.F_SEAL_SHRINK)}},
		{"a regular file", uint64(page), []int{file}},
		{"a pipe", uint64(page), []int{pipe}},
		{"a size past the memfd's", uint64(2 * page), []int{memfdtest.New(t, "softfabric-memtest", page, sealed)}},
		{"size 0", 0, []int{memfdtest.New(t, "softfabric-memtest", page, sealed)}},
		{"a size not whole pages", uint64(page + 1), []int{memfdtest.New(t, "softfabric-memtest", 2*page, sealed)}},
		{"no descriptor", uint64(page), nil},
		{"two descriptors", uint64(page), []int{memfdtest.New(t, "softfabric-memtest", page, sealed), memfdtest.New(t, "softfabric-memtest", page, sealed)}},
	} {
		if err := memCall(t, c, daemonapi.OpAddMemory, 1, x.size, x.fds...); !errors.Is(err, daemonapi.ErrInvalid) {
			t.Errorf("add_memory of %s: %v, want ErrInvalid", x.what, err)
		}
	}
	if n := len(memfdMaps(t, dpid, "softfabric-memtest")); n != 0 {
		t.Fatalf("the daemon maps %d refused memfds", n)
	}

	// A good one; its ID once only.
	if err := memCall(t, c, daemonapi.OpAddMemory, 7, uint64(2*page), memfdtest.New(t, "softfabric-memtest", 2*page, sealed|unix.F_SEAL_SEAL)); err != nil {
		t.Fatalf("add_memory of a sealed memfd: %v", err)
	}
	if err := memCall(t, c, daemonapi.OpAddMemory, 7, uint64(page), memfdtest.New(t, "softfabric-memtest", page, sealed)); !errors.Is(err, daemonapi.ErrInvalid) {
		t.Errorf("add_memory of an ID in use: %v, want ErrInvalid", err)
	}
	if n := len(memfdMaps(t, dpid, "softfabric-memtest")); n != 1 {
		t.Fatalf("the daemon maps %d test memfds, want the one it took", n)
	}
	if err := memCall(t, c, daemonapi.OpDeleteMemory, 8, 0); !errors.Is(err, daemonapi.ErrInvalid) {
		t.Errorf("delete_memory of an unknown ID: %v, want ErrInvalid", err)
	}
	if err := memCall(t, c, daemonapi.OpDeleteMemory, 7, 0); err != nil {
		t.Fatalf("delete_memory: %v", err)
	}
	if err := memCall(t, c, daemonapi.OpDeleteMemory, 7, 0); !errors.Is(err, daemonapi.ErrInvalid) {
		t.Errorf("delete_memory twice: %v, want ErrInvalid", err)
	}
	if n := len(memfdMaps(t, dpid, "softfabric-memtest")); n != 0 {
		t.Fatalf("the daemon maps %d test memfds after delete_memory", n)
	}
	if n := memfdFDs(t, dpid, "softfabric-memtest"); n != 0 {
		t.Fatalf("the daemon holds %d descriptors of the memfds sent", n)
	}
	for _, a := range daemonAppStats(t, p.A) {
		if a.MemRegions != 0 || a.MemBytes != 0 {
			t.Fatalf("the daemon counts %+v", a)
		}
	}
}

// memAppEnv names the interface when this test binary runs as memApp.
const memAppEnv = "SOFTFABRIC_TEST_MEM_APP"

// memAppSizes are the regions memApp allocates.
var memAppSizes = []int{64 << 10, 128 << 10, 192 << 10}

// memApp is the application TestDaemonUnmapsKilledAppMemory kills: it
// attaches to the daemon serving iface, allocates memAppSizes, says so,
// and waits to be killed (a minute at most).
func memApp(iface string) int {
	d, err := device.Attach(iface, device.OpenOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, n := range memAppSizes {
		b, _, err := d.AllocMemory(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		b[n-1] = 1
	}
	fmt.Println("allocated")
	time.Sleep(time.Minute)
	return 1
}

// TestDaemonUnmapsKilledAppMemory: when an application that shared
// memory is killed, its daemon unmaps all of it (and keeps no descriptor
// of it): the memory goes back to the system with the process.
func TestDaemonUnmapsKilledAppMemory(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A)
	dpid := daemonStats(t, p.A).PID
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := p.A.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), memAppEnv+"="+p.A.Iface)
	var serr bytes.Buffer
	cmd.Stderr = &serr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	said := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said <- sc.Scan() && sc.Text() == "allocated"
	}()
	select {
	case ok := <-said:
		if !ok {
			<-exited
			t.Fatalf("the application failed: %s", serr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the application did not allocate in 20 s")
	}
	var want uint64
	for _, n := range memAppSizes {
		want += uint64(n)
	}
	if a := appOf(t, p.A, cmd.Process.Pid); a == nil || a.MemRegions != len(memAppSizes) || a.MemBytes != want {
		t.Fatalf("the daemon shows the application as %+v, want %d regions of %d bytes", a, len(memAppSizes), want)
	}
	if n := len(memfdMaps(t, dpid, memName)); n != len(memAppSizes) {
		t.Fatalf("the daemon maps %d regions, want %d", n, len(memAppSizes))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		maps, fds := len(memfdMaps(t, dpid, memName)), memfdFDs(t, dpid, memName)
		if maps == 0 && fds == 0 && daemonApps(t, p.A) == 0 {
			t.Logf("unmapped %v after SIGKILL", time.Since(killed))
			break
		}
		if time.Since(killed) > 2*time.Second {
			t.Fatalf("2 s after SIGKILL the daemon maps %d regions of the killed application and holds %d descriptors", maps, fds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
