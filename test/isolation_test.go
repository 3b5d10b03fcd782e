package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// driveAll runs every device until done or the deadline.
func driveAll(t *testing.T, ends []*end, d time.Duration, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; !done(); i++ {
		for _, e := range ends {
			if _, err := e.d.Progress(); err != nil {
				t.Fatal(err)
			}
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			t.Fatalf("not done after %v", d)
		}
	}
}

// rcWriteFrame builds an RC RDMA write of 64 bytes of 0xee from e's
// address to QPN destQPN at gid, for addr and rkey: a frame built by hand,
// sent on the link without a queue pair behind it.
func rcWriteFrame(t *testing.T, e *end, gid netip.Addr, destQPN uint32, addr uint64, rkey uint32) []byte {
	t.Helper()
	var pf wire.PathFields
	if err := e.h.Do(func() (err error) {
		pf, err = e.d.Path(context.Background(), gid, 0x1234, destQPN)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	path, err := wire.NewPath(pf)
	if err != nil {
		t.Fatal(err)
	}
	hl := path.HeaderLen()
	info := wire.RCWriteOnly.Info()
	f := make([]byte, hl+info.HeaderLen+64+wire.ICRCSize)
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: destQPN, AckReq: true, PSN: 0})
	wire.RETH(f[hl+info.RETH:]).Encode(addr, rkey, 64)
	for i := hl + info.HeaderLen; i < hl+info.HeaderLen+64; i++ {
		f[i] = 0xee
	}
	path.Finish(f)
	return f
}

// TestDaemonIsolation: four applications attached to two daemons (two on
// each side) try to reach what is not theirs, locally and over the wire:
//
//   - a queue pair number another application holds cannot be taken;
//   - RC frames an application builds by hand towards a queue pair it is
//     not connected to (another application's peer) are dropped by its
//     daemon, counted as denied, and never reach the peer;
//   - an rkey of another application's memory, used through a queue pair
//     connected to a third, gets the IBTA remote access error: memory
//     regions belong to the application that registered them.
func TestDaemonIsolation(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	a1, a2, b3, b4 := open(t, p.A), open(t, p.A), open(t, p.B), open(t, p.B)
	ends := []*end{a1, a2, b3, b4}
	q1, q3 := rcPair(t, a1, b3, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16))

	// A QPN belongs to one application.
	if _, err := a2.d.NewRC(device.QPConfig{QPN: q1.QPN(), SendCQ: a2.scq, RecvCQ: a2.rcq, RQ: verbs.NewRecvQueue(16)}, all); !errors.Is(err, device.ErrQPNInUse) {
		t.Fatalf("a second application took QPN %d of the first: %v", q1.QPN(), err)
	}

	// The legitimate path works: app 1 writes into app 3's memory.
	b3.buf.Bytes()[0] = 0
	fill(a1.buf.Bytes()[:64], 1)
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(a1.buf, 0, 64), RemoteAddr: b3.buf.Addr(), RKey: b3.buf.RKey(), ID: 1}
	if err := q1.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := pollAll(t, ends, a1.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("app 1's write: %v", c[0].Status)
	}

	// App 2 speaks for app 1's connection: its daemon drops the frames.
	before := q3.Stats().RxPackets
	mark := b3.buf.Bytes()[128]
	f := rcWriteFrame(t, a2, b3.gid(), q3.QPN(), b3.buf.Addr()+128, b3.buf.RKey())
	for range 10 {
		if n, err := a2.d.Link().Send([][]byte{f}); n != 1 || err != nil {
			t.Fatalf("sending on app 2's link: %d, %v", n, err)
		}
	}
	deadline := time.Now().Add(time.Second)
	var denied uint64
	for denied < 10 && time.Now().Before(deadline) {
		driveAll(t, ends, time.Second, func() bool { return true })
		denied = appsDenied(t, p.A)
	}
	if denied < 10 {
		t.Fatalf("A's daemon denied %d of app 2's 10 spoofed frames", denied)
	}
	driveAll(t, ends, 2*time.Second, func() bool { return time.Now().After(deadline) })
	if got := q3.Stats().RxPackets; got != before || b3.buf.Bytes()[128] != mark {
		t.Fatalf("app 3's queue pair received %d packets from app 2's spoofed frames", got-before)
	}

	// A leaked rkey of app 4 is worth nothing through app 3's queue pair.
	b4.buf.Bytes()[0] = 0x5a
	wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(a1.buf, 0, 64), RemoteAddr: b4.buf.Addr(), RKey: b4.buf.RKey(), ID: 2}
	if err := q1.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := pollAll(t, ends, a1.scq, 1); c[0].Status != verbs.RemAccessErr {
		t.Fatalf("write with another application's rkey: %v, want %v", c[0].Status, verbs.RemAccessErr)
	}
	if b4.buf.Bytes()[0] != 0x5a {
		t.Fatal("app 4's memory changed")
	}
}

func pollAll(t *testing.T, ends []*end, cq *verbs.CQ, n int) []verbs.Completion {
	t.Helper()
	out := make([]verbs.Completion, 0, n)
	buf := make([]verbs.Completion, 64)
	driveAll(t, ends, 20*time.Second, func() bool {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		return len(out) >= n
	})
	return out
}

// appsDenied sums the frames h's daemon refused from its applications.
func appsDenied(t *testing.T, h *netnstest.Host) uint64 {
	t.Helper()
	return sumApps(t, h, func(a daemonapi.AppStats) uint64 { return a.Denied })
}

// sumApps sums a figure over the applications h's daemon serves.
func sumApps(t *testing.T, h *netnstest.Host, figure func(daemonapi.AppStats) uint64) uint64 {
	t.Helper()
	var n uint64
	for _, a := range daemonAppStats(t, h) {
		n += figure(a)
	}
	return n
}

// TestDaemonUsers: a user who is not root gets a clear refusal from the
// daemon; started with --group, the daemon admits the group's members.
func TestDaemonUsers(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	// The binary where user nobody can run it.
	dir, err := os.MkdirTemp("", "softfabric-users")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "softfabric")
	b, err := os.ReadFile(sfBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(args ...string) result {
		cmd := p.A.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return runCmd(cmd)
	}
	up(t, p.A)
	r := asNobody("perf", "write", "--iface", "eth0", "--timeout", "2s", p.B.Addr.Addr().String())
	if r.code != 1 || !strings.Contains(r.err, "not allowed to use this softfabric daemon: user nobody is not root") || strings.Count(strings.TrimSpace(r.err), "\n") != 0 {
		t.Fatalf("perf as nobody: %+v", r)
	}
	mustSF(t, p.A, "down", "eth0")
	upWith(t, []string{"--group", "nogroup"}, p.A)
	// Admitted: it gets as far as the peer, which serves nothing.
	r = asNobody("perf", "write", "--iface", "eth0", "--timeout", "2s", p.B.Addr.Addr().String())
	if r.code != 1 || strings.Contains(r.err, "not allowed") || !strings.Contains(r.err, "connect") {
		t.Fatalf("perf as nobody, member of the daemon's group: %+v", r)
	}
}

// TestDaemonDetachesCorruptRings: an application that scribbles on its
// shared rings (here: a from-app sequence word a round ahead, as a buggy
// or hostile process could write) is detached by its daemon: its device
// fails with device.ErrGone, its QPNs are released, and another
// application on the same daemon carries on.
func TestDaemonDetachesCorruptRings(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	bad, good, peer := open(t, p.A), open(t, p.A), open(t, p.B)
	ends := []*end{bad, good, peer}
	qg, _ := rcPair(t, good, peer, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16))
	if _, err := bad.d.NewRC(device.QPConfig{SendCQ: bad.scq, RecvCQ: bad.rcq, RQ: verbs.NewRecvQueue(16)}, all); err != nil {
		t.Fatal(err)
	}
	if n := daemonApps(t, p.A); n != 2 {
		t.Fatalf("A's daemon serves %d applications, want 2", n)
	}
	// The bad application's region is the memfd named for A's first
	// application that this process received first: map it again and
	// write, into the from-app slot the daemon reads next, a sequence word
	// a round ahead of any frame (the layout is shmlink's: slot count at
	// 12, slot size at 16, file size at 24, the from-app consumer index at
	// 320, slots of slot size + 64 bytes from 4096, to-app then from-app).
	region := findMemfd(t, "softfabric-eth0-app1-q0")
	var hdr [32]byte
	if _, err := syscall.Pread(region, hdr[:], 0); err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(region, 0, int(binary.LittleEndian.Uint64(hdr[24:])), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	slots, stride := binary.LittleEndian.Uint32(hdr[12:]), binary.LittleEndian.Uint32(hdr[16:])+64
	next := binary.LittleEndian.Uint32(mem[320:])
	seq := 4096 + int(slots+next&(slots-1))*int(stride)
	binary.LittleEndian.PutUint32(mem[seq:], next+1+slots)
	deadline := time.Now().Add(2 * time.Second)
	for daemonApps(t, p.A) != 1 {
		if time.Now().After(deadline) {
			out, _ := p.A.Exec(sfBin, "status", p.A.Iface)
			t.Fatalf("the application with corrupt rings is still attached after 2 s (slot %d's sequence word now %d):\n%s", next&(slots-1), binary.LittleEndian.Uint32(mem[seq:]), out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Its device is gone; the other application's connection works.
	deadline = time.Now().Add(2 * time.Second)
	for {
		if _, err := bad.d.Progress(); errors.Is(err, device.ErrGone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached application's device did not fail with ErrGone")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fill(good.buf.Bytes()[:64], 7)
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(good.buf, 0, 64), RemoteAddr: peer.buf.Addr(), RKey: peer.buf.RKey(), ID: 1}
	if err := qg.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := pollAll(t, ends[1:], good.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("the other application's write: %v", c[0].Status)
	}
}

// findMemfd returns the lowest descriptor of this process's memfds named
// name: the first mapped (both daemons name their first application's
// region alike).
func findMemfd(t *testing.T, name string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	found := -1
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, "/memfd:"+name+" ") && target != "/memfd:"+name {
			continue
		}
		if fd, err := strconv.Atoi(e.Name()); err == nil && (found < 0 || fd < found) {
			found = fd
		}
	}
	if found < 0 {
		t.Fatalf("no memfd %q among this process's descriptors", name)
	}
	return found
}

// TestDaemonMaxApps: a daemon started with `up --max-apps 2` refuses a
// third application with an error that says why, and takes one again
// once another left.
func TestDaemonMaxApps(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	upWith(t, []string{"--max-apps", "2"}, p.A)
	first, _ := open(t, p.A), open(t, p.A)
	var err error
	if err := p.A.Do(func() error {
		var d *device.Device
		d, err = device.OpenAny(p.A.Iface, device.OpenOptions{})
		if err == nil {
			d.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, daemonapi.ErrInvalid) || !strings.Contains(err.Error(), "already serves 2 applications") {
		t.Fatalf("a third application: %v", err)
	}
	first.d.Close()
	deadline := time.Now().Add(2 * time.Second)
	for daemonApps(t, p.A) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first application still attached 2 s after it closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	open(t, p.A)
}

// floodEnv names the control socket when this test binary runs as flood.
const floodEnv = "SOFTFABRIC_TEST_FLOOD"

// floodConns is how many connections flood opens.
const floodConns = 300

// flood is the user TestDaemonConnectionFlood runs as nobody: it opens
// floodConns connections to the daemon's control socket at path, asks
// nothing on all but the first (which asks for statistics and prints the
// answer), and prints how many the daemon closed within 4 s.
func flood(path string) int {
	var conns []*net.UnixConn
	for range floodConns {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Println("connected")
	_ = conns[0].SetDeadline(time.Now().Add(4 * time.Second))
	rep, _, err := daemonapi.Call(conns[0], daemonapi.Request{Op: daemonapi.OpStats})
	if err == nil {
		err = rep.Error()
	}
	fmt.Println("stats:", err)
	deadline := time.Now().Add(4 * time.Second)
	closed := 0
	var b [512]byte
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		for {
			if _, err := c.Read(b[:]); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
					closed++
				}
				break
			}
		}
	}
	fmt.Println("closed:", closed)
	return 0
}

// TestDaemonConnectionFlood: a user the daemon does not admit opens
// hundreds of connections to its control socket (which any local user
// may reach) and holds them. The daemon answers what it asks with the
// refusal, closes every connection within its limit (2 s), and an
// application of root attaches and works meanwhile.
func TestDaemonConnectionFlood(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	var path string
	if err := p.A.Do(func() error {
		ns, err := ctrl.NetNSID()
		path = daemonapi.SocketPath(ctrl.RunDir(ns, p.A.Iface))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The test binary where user nobody can run it.
	dir, err := os.MkdirTemp("", "softfabric-flood")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "flood")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), floodEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, serr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &serr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "connected"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not connect: %s %s", out.String(), serr.String())
		}
	}
	// Meanwhile root's applications attach and work.
	a, b2 := open(t, p.A), open(t, p.B)
	qa, _ := rcPair(t, a, b2, verbs.NewRecvQueue(16), verbs.NewRecvQueue(16))
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(a.buf, 0, 64), RemoteAddr: b2.buf.Addr(), RKey: b2.buf.RKey()}
	if err := qa.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if c := pollAll(t, []*end{a, b2}, a.scq, 1); c[0].Status != verbs.Success {
		t.Fatalf("a write beside the flood: %v", c[0].Status)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("the flood: %v: %s", waitErr, serr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the flood did not end")
	}
	st := daemonStats(t, p.A)
	t.Logf("the flood: %s; the daemon refused %d connections, closed %d at once", strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "; "), st.Refused, st.Dropped)
	if !strings.Contains(out.String(), "stats: not allowed to use this softfabric daemon: user nobody is not root") {
		t.Errorf("the flood's request was not refused: %s", out.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf("closed: %d\n", floodConns)) {
		t.Errorf("the daemon did not close every connection of the flood within 4 s: %s", out.String())
	}
	if st.Refused+st.Dropped < floodConns {
		t.Errorf("the daemon counted %d refused and %d dropped connections of %d", st.Refused, st.Dropped, floodConns)
	}
}
