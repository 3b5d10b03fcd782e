package netnstest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/internal/cpulist"
)

// link returns iface in h as netlink reports it.
func link(t *testing.T, h *Host, iface string) netlink.Link {
	t.Helper()
	var l netlink.Link
	if err := h.Do(func() (err error) { l, err = netlink.LinkByName(iface); return err }); err != nil {
		t.Fatal(err)
	}
	return l
}

// checkQueues checks the queues iface in h allocated (netlink) and uses
// (its own sysfs).
func checkQueues(t *testing.T, h *Host, iface string, allocated, active int) {
	t.Helper()
	a := link(t, h, iface).Attrs()
	rx, tx, err := h.Queues(iface)
	if err != nil {
		t.Fatal(err)
	}
	if a.NumRxQueues != allocated || a.NumTxQueues != allocated || rx != active || tx != active {
		t.Fatalf("%s in %s: %d rx and %d tx queues allocated, %d and %d in use; want %d allocated, %d in use",
			iface, h.NS, a.NumRxQueues, a.NumTxQueues, rx, tx, allocated, active)
	}
}

// possibleCPUs counts /sys/devices/system/cpu/possible: a default veth
// allocates a queue per possible CPU.
func possibleCPUs(t *testing.T) int {
	t.Helper()
	cpus, err := cpulist.Possible()
	if err != nil {
		t.Fatal(err)
	}
	return len(cpus)
}

// tcp sends "hello" from a to b over TCP.
func tcp(t *testing.T, a, b *Host) {
	t.Helper()
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp", b.Addr.Addr().String()+":7000")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	var got string
	if err := a.Do(func() error {
		c, err := net.DialTimeout("tcp", b.Addr.Addr().String()+":7000", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 5)
		_, err = c.Read(buf)
		got = string(buf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != "hello" {
		t.Fatalf("got %q", got)
	}
}

func TestPairPingAndTCP(t *testing.T) {
	p := NewPair(t, Options{Queues: 2})
	if out, err := p.A.Exec("ping", "-c", "1", "-W", "2", p.B.Addr.Addr().String()); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	if out, err := p.A.Exec("ping", "-6", "-c", "1", "-W", "2", p.B.Addr6.Addr().String()); err != nil {
		t.Fatalf("ping -6 (no DAD wait): %v\n%s", err, out)
	}
	tcp(t, p.A, p.B)
	for _, h := range []*Host{p.A, p.B} {
		checkQueues(t, h, "eth0", 2, 2)
		if l := link(t, h, "eth0"); l.Type() != "veth" || l.Attrs().MTU != 1500 || l.Attrs().Index != h.Index ||
			l.Attrs().HardwareAddr.String() != h.MAC.String() || l.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("%s: %+v, host %+v", h.NS, l.Attrs(), h)
		}
		if l := link(t, h, "lo"); l.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("%s: lo down", h.NS)
		}
	}
}

// TestDefaultQueues: Queues 0 is the kernel's default veth: a queue
// allocated per possible CPU, one in use.
func TestDefaultQueues(t *testing.T) {
	p := NewPair(t, Options{})
	alloc := min(possibleCPUs(t), 4096)
	for _, h := range []*Host{p.A, p.B} {
		checkQueues(t, h, "eth0", alloc, 1)
	}
}

// TestDefaultQueuesAsIP: a default pair has the queues of a veth made
// with `ip link add name a type veth peer name b`.
func TestDefaultQueuesAsIP(t *testing.T) {
	RequireIP(t)
	p := NewPair(t, Options{})
	if _, err := Run("ip", "-n", p.A.NS, "link", "add", "name", "a", "type", "veth", "peer", "name", "b"); err != nil {
		t.Fatal(err)
	}
	ours, theirs := link(t, p.A, "eth0").Attrs(), link(t, p.A, "a").Attrs()
	if ours.NumRxQueues != theirs.NumRxQueues || ours.NumTxQueues != theirs.NumTxQueues {
		t.Fatalf("eth0 allocated %d/%d queues, ip's veth %d/%d", ours.NumRxQueues, ours.NumTxQueues, theirs.NumRxQueues, theirs.NumTxQueues)
	}
	checkQueues(t, p.A, "a", theirs.NumRxQueues, 1)
}

func TestFourQueues(t *testing.T) {
	p := NewPair(t, Options{Queues: 4, MTU: 9000})
	for _, h := range []*Host{p.A, p.B} {
		checkQueues(t, h, "eth0", 4, 4)
		if mtu := link(t, h, "eth0").Attrs().MTU; mtu != 9000 {
			t.Fatalf("%s: MTU %d", h.NS, mtu)
		}
	}
	if out, err := p.A.Exec("ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8900", p.B.Addr.Addr().String()); err != nil {
		t.Fatalf("jumbo ping: %v\n%s", err, out)
	}
	if rx, tx, err := p.A.Queues("lo"); err != nil || rx != 1 || tx != 1 {
		t.Fatalf("lo: %d rx, %d tx queues, %v", rx, tx, err)
	}
	if _, _, err := p.A.Queues("eth9"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Queues(eth9): %v", err)
	}
}

func TestWiredPair(t *testing.T) {
	p := NewWiredPair(t, Options{Queues: 2, MTU: 9000})
	if out, err := p.A.Exec("ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8900", p.B.Addr.Addr().String()); err != nil {
		t.Fatalf("ping through the wire namespace: %v\n%s", err, out)
	}
	tcp(t, p.A, p.B)
	br := link(t, p.Wire, "br0")
	if br.Type() != "bridge" || br.Attrs().Index != p.Wire.Index || br.Attrs().MTU != 9000 || br.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("br0: %s %+v, wire %+v", br.Type(), br.Attrs(), p.Wire)
	}
	for _, name := range []string{p.WireA, p.WireB} {
		l := link(t, p.Wire, name)
		if a := l.Attrs(); l.Type() != "veth" || a.MasterIndex != br.Attrs().Index || a.MTU != 9000 || a.Flags&net.FlagUp == 0 {
			t.Fatalf("%s: %s %+v, want a veth up in br0 (index %d)", name, l.Type(), a, br.Attrs().Index)
		}
		checkQueues(t, p.Wire, name, 2, 2)
	}
	for _, h := range []*Host{p.A, p.B} {
		checkQueues(t, h, "eth0", 2, 2)
	}
}

// nsOf runs readlink /proc/self/ns/KIND in h through each way of running a
// command and returns what each printed.
func nsOf(t *testing.T, h *Host, readlink, kind string) []string {
	t.Helper()
	arg := "/proc/self/ns/" + kind
	var outs []string
	out, err := h.Command(readlink, arg).Output()
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(out))
	if out, err = h.Command(readlink, arg).CombinedOutput(); err != nil {
		t.Fatal(err)
	}
	outs = append(outs, string(out))
	s, err := h.Exec(readlink, arg)
	if err != nil {
		t.Fatal(err)
	}
	outs = append(outs, s)
	var b bytes.Buffer
	cmd := h.Command(readlink, arg)
	cmd.Stdout = &b
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	outs = append(outs, b.String())
	// Start and Wait, from another goroutine than the one that started.
	b.Reset()
	cmd = h.Command(readlink, arg)
	cmd.Stdout = &b
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() { errc <- cmd.Wait() }()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	outs = append(outs, b.String())
	for i, o := range outs {
		outs[i] = strings.TrimSpace(o)
	}
	return outs
}

// sysfsMounts counts the sysfs mounts of this process.
func sysfsMounts(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		if _, after, ok := strings.Cut(s.Text(), " - "); ok && strings.HasPrefix(after, "sysfs ") {
			n++
		}
	}
	return n
}

// testCommand checks that commands started in each host of p run in its
// network namespace, in a mount namespace of their own with its sysfs, as
// under ip netns exec, and leave the test's mounts alone. bin gives the
// path to run a program by.
func testCommand(t *testing.T, p *Pair, bin func(string) string) {
	t.Helper()
	readlink := bin("readlink")
	ours, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	oursMnt, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	mounts := sysfsMounts(t)
	seen := map[string]string{ours: "the test"}
	for _, h := range []*Host{p.A, p.B, p.Wire} {
		if h == nil {
			continue
		}
		var want string
		if err := h.Do(func() (err error) { want, err = os.Readlink("/proc/thread-self/ns/net"); return err }); err != nil {
			t.Fatal(err)
		}
		for _, got := range nsOf(t, h, readlink, "net") {
			if got != want {
				t.Fatalf("process started in %s runs in %s, want %s", h.NS, got, want)
			}
		}
		if other, ok := seen[want]; ok {
			t.Fatalf("%s is %s, the namespace of %s", h.NS, want, other)
		}
		seen[want] = h.NS
		// /sys/class/net lists the namespace's links, and only them.
		var links []string
		if err := h.Do(func() error {
			ls, err := netlink.LinkList()
			for _, l := range ls {
				links = append(links, l.Attrs().Name)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		out, err := h.Command(bin("ls"), "/sys/class/net").Output()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Fields(string(out)), slices.Sorted(slices.Values(links)); !slices.Equal(got, want) {
			t.Fatalf("/sys/class/net of a process started in %s: %q, want %q", h.NS, got, want)
		}
		// A mount namespace of its own, with the namespace's sysfs.
		for _, mnt := range nsOf(t, h, readlink, "mnt") {
			if mnt == oursMnt {
				t.Fatalf("process started in %s shares the test's mount namespace %s", h.NS, mnt)
			}
		}
		out, err = h.Command(bin("cat"), "/sys/class/net/"+h.Iface+"/ifindex", "/sys/class/net/"+h.Iface+"/address").Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d\n%s\n", h.Index, h.MAC); string(out) != want {
			t.Fatalf("sysfs of a process started in %s: %q, want %q", h.NS, out, want)
		}
	}
	if n := sysfsMounts(t); n != mounts {
		t.Fatalf("%d sysfs mounts in the test's mount namespace after the commands, %d before", n, mounts)
	}
	// The command's own failure comes back as exec.Cmd's.
	var ee *exec.ExitError
	if err := p.A.Command(bin("cat"), "/nonexistent").Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("cat /nonexistent: %v", err)
	}
	if _, err := p.A.Command(bin("cat"), "/nonexistent").Output(); !errors.As(err, &ee) || !bytes.Contains(ee.Stderr, []byte("/nonexistent")) {
		t.Fatalf("Output of cat /nonexistent: %v", err)
	}
	gone := &Host{NS: "sf-no-such-netns"}
	if err := gone.Command(bin("cat"), "/dev/null").Run(); err == nil || !strings.Contains(err.Error(), "netns sf-no-such-netns") {
		t.Fatalf("a command in a missing namespace: %v", err)
	}
}

func TestCommand(t *testing.T) {
	p := NewWiredPair(t, Options{})
	testCommand(t, p, func(name string) string { return name })
}

// TestNoIP: without ip(8) on PATH, pairs are made, commands run in them
// and traffic flows, and RequireIP skips.
func TestNoIP(t *testing.T) {
	Require(t)
	bins := map[string]string{}
	for _, name := range []string{"readlink", "cat", "ls"} {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatal(err)
		}
		bins[name] = path
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	if path, err := exec.LookPath("ip"); err == nil {
		t.Fatalf("ip still found, at %s", path)
	}
	var sub *testing.T
	t.Run("RequireIP", func(t *testing.T) {
		sub = t
		RequireIP(t)
		t.Error("RequireIP did not skip")
	})
	if !sub.Skipped() {
		t.Fatal("RequireIP did not skip without ip")
	}
	p := NewPair(t, Options{Queues: 2})
	tcp(t, p.A, p.B)
	checkQueues(t, p.A, "eth0", 2, 2)
	w := NewWiredPair(t, Options{})
	tcp(t, w.A, w.B)
	testCommand(t, w, func(name string) string { return bins[name] })
}

// recorder is a testing.TB whose cleanups the test runs and whose Fatal
// ends only the call in progress (see fatal).
type recorder struct {
	testing.TB
	cleanups []func()
	fatal    string
	errors   []string
}

func (r *recorder) Helper()           { r.TB.Helper() }
func (r *recorder) Cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); panic(r) }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	panic(r)
}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// call runs fn, stopping at the recorder's Fatal, then its cleanups.
func (r *recorder) call(fn func()) {
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		fn()
	}()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// ours lists the namespaces of pair number n.
func ours(t *testing.T, n uint32) []string {
	t.Helper()
	ents, err := os.ReadDir(runDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("sf%d-%d-", os.Getpid()%100000, n)
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestCleanup: the namespaces go when the test ends, also when making the
// pair failed midway, and with them the links.
func TestCleanup(t *testing.T) {
	Require(t)
	for _, tc := range []struct {
		name  string
		o     Options
		wired bool
		fatal string // "" if the pair is made
	}{
		{"pair", Options{}, false, ""},
		{"wired", Options{Queues: 2}, true, ""},
		// Past the veth's largest MTU: the links are refused once the
		// namespaces exist.
		{"pair failing", Options{MTU: 1 << 20}, false, "adding veth eth0"},
		{"wired failing", Options{MTU: 1 << 20}, true, "adding bridge br0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			n := seq.Load() + 1
			var p *Pair
			var during []string
			// Handles that keep the namespaces alive past their removal,
			// as a stray process or socket would: their links go anyway.
			held := map[string]netns.NsHandle{}
			defer func() {
				for _, h := range held {
					h.Close()
				}
			}()
			r.call(func() {
				p = newPair(r, tc.o, tc.wired)
				during = ours(t, n)
				for _, name := range during {
					h, err := netns.GetFromName(name)
					if err != nil {
						t.Fatal(err)
					}
					held[name] = h
				}
			})
			if (r.fatal == "") != (tc.fatal == "") || !strings.Contains(r.fatal, tc.fatal) {
				t.Fatalf("making the pair: fatal %q, want %q", r.fatal, tc.fatal)
			}
			if len(r.errors) > 0 {
				t.Fatalf("cleaning up: %q", r.errors)
			}
			if left := ours(t, n); len(left) > 0 {
				t.Fatalf("left in %s: %v", runDir, left)
			}
			if tc.fatal != "" {
				return
			}
			want := 2
			if tc.wired {
				want = 3
			}
			if len(during) != want {
				t.Fatalf("namespaces of the pair: %v, want %d", during, want)
			}
			for _, h := range []*Host{p.A, p.B, p.Wire} {
				if h == nil {
					continue
				}
				if err := h.Do(func() error { return nil }); err == nil {
					t.Fatalf("%s still entered after the cleanup", h.NS)
				}
				nl, err := netlink.NewHandleAt(held[h.NS], unix.NETLINK_ROUTE)
				if err != nil {
					t.Fatal(err)
				}
				links, err := nl.LinkList()
				nl.Close()
				if err != nil {
					t.Fatal(err)
				}
				if len(links) != 1 || links[0].Attrs().Name != "lo" {
					var names []string
					for _, l := range links {
						names = append(names, l.Attrs().Name)
					}
					t.Fatalf("links left in %s, held open: %v", h.NS, names)
				}
			}
		})
	}
}
