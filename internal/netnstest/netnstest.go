// Package netnstest builds test hosts out of network namespaces joined by
// veth pairs, for tests that need a real kernel data path: XDP, AF_XDP,
// tc, neighbours and routes. Addresses come from 198.18.0.0/15 only, inside
// namespaces the test creates and removes.
//
// Everything is done with netlink and setns(2), so the package needs root
// but not iproute2: some of the machines the real-kernel tests and
// benchmarks run on have no ip(8). The namespaces are named and
// bind-mounted under /run/netns as `ip netns add` makes them, so where ip
// exists, `ip netns exec NAME` and `ip -n NAME` work on them too.
//
// Tests that need root call Require, and tests that exercise ip(8) itself
// call RequireIP; both skip with the reason when what they need is missing
// and fail instead under CI=true, so that a CI run on a capable machine
// never skips the real-kernel tests silently.
package netnstest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Require skips t unless it runs as root, which creating namespaces and
// links needs; under CI=true it fails instead of skipping.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "needs root to create network namespaces")
	}
}

// RequireIP is Require for tests that run ip(8) itself, e.g. to attach
// an XDP object the way users do: it also skips (or fails under CI=true)
// when ip is not on PATH.
func RequireIP(t testing.TB) {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("ip"); err != nil {
		skip(t, "needs ip(8) from iproute2")
	}
}

func skip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (a skip is a failure under CI=true)", why)
	}
	t.Skip(why)
}

// Host is one end of a pair: a network namespace with one veth.
type Host struct {
	NS    string       // namespace name, under /run/netns
	Iface string       // the veth inside it
	Addr  netip.Prefix // its IPv4 address
	Addr6 netip.Prefix // its IPv6 address
	MAC   net.HardwareAddr
	Index int // ifindex inside the namespace
}

// Pair is two hosts joined by a veth pair, or, with NewWiredPair, by a
// third namespace (Wire) that bridges them.
type Pair struct {
	A, B *Host
	// Wire, in a wired pair, is the namespace between A and B: its
	// interfaces WireA (towards A) and WireB (towards B) are bridged, so
	// frames cross it through the kernel's normal transmit path, where tc
	// programs (an impairment) see them. AF_XDP transmit bypasses tc on
	// the sending host itself, which is why the faults go in the middle.
	Wire         *Host
	WireA, WireB string
}

// Options shape a pair.
type Options struct {
	// Queues is the number of rx and tx queues each veth allocates, all
	// of them in use, as `ip link add ... numrxqueues N numtxqueues N`
	// makes them. 0 leaves the counts to the kernel, as a veth made
	// without them (`ip link add name a type veth peer name b`): one
	// queue allocated per possible CPU, one of them in use.
	Queues int
	// MTU of both veths (and of the bridge of a wired pair); 0 leaves the
	// kernel's 1500.
	MTU int
}

var seq atomic.Uint32

// Run runs a command and returns its combined output and an error that
// includes the output.
func Run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// NewWiredPair creates hosts A and B (as NewPair) joined through a middle
// namespace that bridges a veth towards each.
func NewWiredPair(t testing.TB, o Options) *Pair {
	t.Helper()
	return newPair(t, o, true)
}

// NewPair creates two namespaces joined by a veth pair with addresses
// 198.18.0.1/24 and 198.18.0.2/24 (fd00:198:18::1/64 and ::2, without
// duplicate address detection) and removes them when the test ends, even
// when it fails midway. Interface names are eth0 in both namespaces, as
// on real hosts.
func NewPair(t testing.TB, o Options) *Pair {
	t.Helper()
	return newPair(t, o, false)
}

// ns is a namespace being set up: a handle to it and a netlink handle
// whose socket lives in it.
type ns struct {
	h  netns.NsHandle
	nl *netlink.Handle
}

func (n *ns) close() {
	if n.nl != nil {
		n.nl.Close()
	}
	n.h.Close()
}

func newPair(t testing.TB, o Options, wired bool) *Pair {
	t.Helper()
	Require(t)
	if o.Queues < 0 || o.MTU < 0 {
		t.Fatalf("netnstest: options %+v", o)
	}
	id := fmt.Sprintf("sf%d-%d", os.Getpid()%100000, seq.Add(1))
	p := &Pair{
		A: &Host{NS: id + "-a", Iface: "eth0", Addr: netip.MustParsePrefix("198.18.0.1/24"), Addr6: netip.MustParsePrefix("fd00:198:18::1/64")},
		B: &Host{NS: id + "-b", Iface: "eth0", Addr: netip.MustParsePrefix("198.18.0.2/24"), Addr6: netip.MustParsePrefix("fd00:198:18::2/64")},
	}
	hosts := []*Host{p.A, p.B}
	if wired {
		p.Wire = &Host{NS: id + "-w", Iface: "br0"}
		p.WireA, p.WireB = "wa", "wb"
		hosts = append(hosts, p.Wire)
	}

	// Registered before anything exists, so that a failure at any step
	// removes what the earlier ones made. Cleanups run last in, first
	// out: this one runs after those of the test's sockets and processes.
	var made []*Host
	t.Cleanup(func() {
		for _, h := range made {
			if err := remove(h); err != nil {
				t.Errorf("netnstest: %v", err)
			}
		}
	})
	nss := make(map[*Host]*ns)
	defer func() {
		for _, n := range nss {
			n.close()
		}
	}()
	for _, h := range hosts {
		n, err := create(h.NS)
		if n != nil {
			made = append(made, h)
			nss[h] = n
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	if err := wire(p, nss, o); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Host{p.A, p.B} {
		if err := configure(h, nss[h].nl); err != nil {
			t.Fatal(err)
		}
	}
	// Ready for traffic: the kernel acts on a carrier change (bridge
	// ports forwarding, IPv6 joining the solicited-node groups of its
	// addresses, so that neighbour solicitations get answers) only once
	// its link watcher has run, up to a second later, and it is then that
	// the operational state turns up.
	ends := map[*Host][]string{p.A: {p.A.Iface}, p.B: {p.B.Iface}}
	if wired {
		ends[p.Wire] = []string{p.WireA, p.WireB, p.Wire.Iface}
	}
	for h, names := range ends {
		for _, name := range names {
			if err := waitOperUp(nss[h].nl, name); err != nil {
				t.Fatalf("%s: %v", h.NS, err)
			}
		}
	}
	if wired {
		// A bridge takes the address of a port; now it has them.
		br, err := nss[p.Wire].nl.LinkByName(p.Wire.Iface)
		if err != nil {
			t.Fatalf("%s: %v", p.Wire.NS, err)
		}
		p.Wire.MAC, p.Wire.Index = br.Attrs().HardwareAddr, br.Attrs().Index
	}
	return p
}

// waitOperUp waits until link name is operationally up.
func waitOperUp(nl *netlink.Handle, name string) error {
	const limit = 5 * time.Second
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		l, err := nl.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Since(start) > limit {
			return fmt.Errorf("%s still %s after %v", name, l.Attrs().OperState, limit)
		}
	}
}

// wire makes the veths, with their final names, directly in the
// namespaces they belong to, and in a wired pair the bridge between.
func wire(p *Pair, nss map[*Host]*ns, o Options) error {
	veth := func(name, peer string, peerNS netns.NsHandle, master int) *netlink.Veth {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU, la.MasterIndex = name, o.MTU, master
		// Zero sends no IFLA_NUM_*_QUEUES at all, for the kernel's
		// defaults on both ends.
		la.NumRxQueues, la.NumTxQueues = o.Queues, o.Queues
		v := netlink.NewVeth(la)
		v.PeerName, v.PeerNamespace = peer, netlink.NsFd(peerNS)
		return v
	}
	if p.Wire == nil {
		v := veth(p.A.Iface, p.B.Iface, nss[p.B].h, 0)
		if err := nss[p.A].nl.LinkAdd(v); err != nil {
			return fmt.Errorf("adding veth %s (%s) - %s (%s): %w", p.A.Iface, p.A.NS, p.B.Iface, p.B.NS, err)
		}
		return nil
	}
	w := p.Wire
	nl := nss[w].nl
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = w.Iface, o.MTU
	if err := nl.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		return fmt.Errorf("adding bridge %s in %s: %w", w.Iface, w.NS, err)
	}
	br, err := nl.LinkByName(w.Iface)
	if err != nil {
		return fmt.Errorf("bridge %s in %s: %w", w.Iface, w.NS, err)
	}
	for _, end := range []struct {
		name string
		h    *Host
	}{{p.WireA, p.A}, {p.WireB, p.B}} {
		if err := nl.LinkAdd(veth(end.name, end.h.Iface, nss[end.h].h, br.Attrs().Index)); err != nil {
			return fmt.Errorf("adding veth %s (%s) - %s (%s): %w", end.name, w.NS, end.h.Iface, end.h.NS, err)
		}
	}
	for _, name := range []string{p.WireA, p.WireB, w.Iface} {
		if err := setUp(nl, name); err != nil {
			return fmt.Errorf("%s: %w", w.NS, err)
		}
	}
	return nil
}

// configure addresses h's veth, brings it and lo up, and records its MAC
// and index.
func configure(h *Host, nl *netlink.Handle) error {
	l, err := nl.LinkByName(h.Iface)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", h.NS, h.Iface, err)
	}
	for _, a := range []*netlink.Addr{
		// No broadcast address, as `ip addr add` without brd.
		{IPNet: ipNet(h.Addr), Broadcast: net.IPv4zero},
		{IPNet: ipNet(h.Addr6), Flags: unix.IFA_F_NODAD},
	} {
		if err := nl.AddrAdd(l, a); err != nil {
			return fmt.Errorf("%s: adding %s to %s: %w", h.NS, a.IPNet, h.Iface, err)
		}
	}
	for _, name := range []string{h.Iface, "lo"} {
		if err := setUp(nl, name); err != nil {
			return fmt.Errorf("%s: %w", h.NS, err)
		}
	}
	h.MAC, h.Index = l.Attrs().HardwareAddr, l.Attrs().Index
	return nil
}

func setUp(nl *netlink.Handle, name string) error {
	l, err := nl.LinkByName(name)
	if err == nil {
		err = nl.LinkSetUp(l)
	}
	if err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

// runDir is where named namespaces are bind-mounted (netns.NewNamed,
// `ip netns add`).
const runDir = "/run/netns"

// sharedRunDir makes runDir a mount point with shared propagation, as
// `ip netns add` does, so that removing a namespace's bind mount also
// removes the copies in the private mount namespaces of the processes
// Command starts (and of ip netns exec), and the namespace is freed
// though one of them still runs.
var sharedRunDir = sync.OnceValue(func() error {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself.
		if err := unix.Mount(runDir, runDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", runDir, err)
		}
		err = unix.Mount("", runDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("making %s shared: %w", runDir, err)
	}
	return nil
})

// create creates the named namespace, as `ip netns add` does, with a
// netlink handle in it. A non-nil ns means the namespace exists and is the
// caller's to remove, even with an error.
func create(name string) (*ns, error) {
	if err := sharedRunDir(); err != nil {
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	path := filepath.Join(runDir, name)
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("adding netns %s: %s exists (%v)", name, path, err)
	}
	var n *ns
	err := locked(func() error {
		// NewNamed moves this thread into the new namespace; locked
		// never gives the thread back.
		h, err := netns.NewNamed(name)
		if err != nil {
			if _, serr := os.Lstat(path); serr == nil {
				// The bind mount failed after the file was made.
				_ = unix.Unmount(path, unix.MNT_DETACH)
				_ = os.Remove(path)
			}
			return fmt.Errorf("adding netns %s: %w", name, err)
		}
		n = &ns{h: h}
		if n.nl, err = netlink.NewHandleAt(h, unix.NETLINK_ROUTE); err != nil {
			return fmt.Errorf("netlink in netns %s: %w", name, err)
		}
		return nil
	})
	return n, err
}

// remove deletes h's veth, which takes its peer with it at once, then
// the namespace's name. The namespace and whatever else is in it go when
// the last process, thread or file using it does.
func remove(h *Host) error {
	target, err := netns.GetFromName(h.NS)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the test removed it itself
	}
	if err != nil {
		return fmt.Errorf("removing netns %s: %w", h.NS, err)
	}
	nl, err := netlink.NewHandleAt(target, unix.NETLINK_ROUTE)
	target.Close()
	var lerr error
	if err == nil {
		if l, err := nl.LinkByName(h.Iface); err == nil {
			lerr = nl.LinkDel(l)
		}
		nl.Close()
	}
	if err := netns.DeleteNamed(h.NS); err != nil {
		return fmt.Errorf("removing netns %s: %w", h.NS, err)
	}
	if lerr != nil {
		return fmt.Errorf("removing %s in netns %s: %w", h.Iface, h.NS, lerr)
	}
	return nil
}

// locked runs fn on a goroutine locked to its OS thread and waits for it.
// The thread is never unlocked: it ends with the goroutine, so whatever
// namespace fn left it in, no other goroutine runs there.
func locked(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// Do runs fn on an OS thread switched into the host's namespace. Sockets
// fn creates belong to that namespace and may be used from any goroutine
// afterwards. The thread keeps the process's mount namespace: /sys there
// still describes the test process's network namespace, not h's (Queues
// and Command mount h's own sysfs).
func (h *Host) Do(fn func() error) error {
	return h.do(false, fn)
}

// do runs fn as Do does, with the namespace's own sysfs on /sys when
// sysfs is set. Errors entering the namespace are wrapped; fn's error is
// returned as it is.
func (h *Host) do(sysfs bool, fn func() error) error {
	var ferr error
	err := locked(func() error {
		target, err := netns.GetFromName(h.NS)
		if err != nil {
			return fmt.Errorf("netns %s: %w", h.NS, err)
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("entering netns %s: %w", h.NS, err)
		}
		if sysfs {
			if err := privateSysfs(h.NS); err != nil {
				return fmt.Errorf("netns %s: %w", h.NS, err)
			}
		}
		ferr = fn()
		return nil
	})
	if err != nil {
		return err
	}
	return ferr
}

// privateSysfs gives the calling thread, already in the network namespace
// called name, a mount namespace of its own with a sysfs that describes
// that network namespace on /sys, as `ip netns exec` does: sysfs shows the
// network devices of the namespace that mounted it. Mounts do not
// propagate back to the host. The thread must never run anything else.
func privateSysfs(name string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unsharing the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "none", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making / a slave mount: %w", err)
	}
	var flags uintptr
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil {
		// Perhaps nothing was mounted there; a read-only sysfs that
		// could not be unmounted can only be covered by a read-only one.
		var st unix.Statfs_t
		if unix.Statfs("/sys", &st) == nil && st.Flags&unix.ST_RDONLY != 0 {
			flags = unix.MS_RDONLY
		}
	}
	if err := unix.Mount(name, "/sys", "sysfs", flags, ""); err != nil {
		return fmt.Errorf("mounting sysfs on /sys: %w", err)
	}
	return nil
}

// Queues counts the rx and tx queues iface in h uses (real_num_rx_queues
// and real_num_tx_queues), as the rx-N and tx-N directories under
// /sys/class/net/IFACE/queues of the namespace's own sysfs list them. For
// a veth they are what `ethtool -l` reports as current; the queues it
// allocated are netlink's NumRxQueues and NumTxQueues.
func (h *Host) Queues(iface string) (rx, tx int, err error) {
	err = h.do(true, func() error {
		ents, err := os.ReadDir(filepath.Join("/sys/class/net", iface, "queues"))
		if err != nil {
			return err
		}
		for _, e := range ents {
			switch {
			case strings.HasPrefix(e.Name(), "rx-"):
				rx++
			case strings.HasPrefix(e.Name(), "tx-"):
				tx++
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("counting queues of %s in %s: %w", iface, h.NS, err)
	}
	return rx, tx, nil
}

// Cmd is a command that starts inside a host's namespace. Start, Run,
// Output and CombinedOutput start the process there; the rest is
// exec.Cmd's.
type Cmd struct {
	*exec.Cmd
	host *Host
}

// XDP returns the XDP attributes of the host's interface as netlink reads
// them in its namespace (Attached false when no program is attached).
func (h *Host) XDP() (*netlink.LinkXdp, error) {
	var x *netlink.LinkXdp
	err := h.Do(func() error {
		l, err := netlink.LinkByName(h.Iface)
		if err != nil {
			return err
		}
		x = l.Attrs().Xdp
		if x == nil {
			x = &netlink.LinkXdp{}
		}
		return nil
	})
	return x, err
}

// Command returns a command that runs inside the host's namespace, as
// `ip netns exec NS name args...` would run it, without needing ip(8):
// the process is forked from a thread that entered the namespace and
// inherits it. Like ip netns exec, it gets a mount namespace of its own
// with the namespace's sysfs on /sys (so /sys/class/net lists the
// namespace's interfaces), and its mounts do not propagate back; unlike
// it, nothing from /etc/netns/NS is bind-mounted over /etc.
//
// name is looked up in PATH as exec.Command does, before the namespace is
// entered.
func (h *Host) Command(name string, args ...string) *Cmd {
	return &Cmd{Cmd: exec.Command(name, args...), host: h}
}

// Start starts the command inside the host's namespace. The thread that
// forked it ends when Start returns, so SysProcAttr.Pdeathsig, which
// follows the thread and not the process, is refused: use Run, Output or
// CombinedOutput, whose thread waits for the process.
func (c *Cmd) Start() error {
	if c.SysProcAttr != nil && c.SysProcAttr.Pdeathsig != 0 {
		return errors.New("netnstest: Pdeathsig with Start would fire when the starting thread ends")
	}
	return c.host.do(true, c.Cmd.Start)
}

// Run starts the command inside the host's namespace and waits for it.
func (c *Cmd) Run() error {
	return c.host.do(true, c.Cmd.Run)
}

// Output runs the command inside the host's namespace and returns its
// standard output, as exec.Cmd.Output does.
func (c *Cmd) Output() ([]byte, error) {
	var out []byte
	err := c.host.do(true, func() (err error) {
		out, err = c.Cmd.Output()
		return err
	})
	return out, err
}

// CombinedOutput runs the command inside the host's namespace and returns
// its standard output and standard error together.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	var out []byte
	err := c.host.do(true, func() (err error) {
		out, err = c.Cmd.CombinedOutput()
		return err
	})
	return out, err
}

// Exec runs a command inside the host's namespace, as Command does, and
// returns its output.
func (h *Host) Exec(name string, args ...string) (string, error) {
	out, err := h.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s %s: %w: %s", h.NS, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ErrNotRoot is returned by helpers that need root.
var ErrNotRoot = errors.New("netnstest: not root")
