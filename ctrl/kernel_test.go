package ctrl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/internal/netnstest"
)

func TestLookupDevice(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{Queues: 2})
	var d *Device
	var ns uint64
	err := p.A.Do(func() (err error) {
		if d, err = LookupDevice("eth0"); err != nil {
			return err
		}
		ns, err = NetNSID()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "eth0" || d.Index != p.A.Index || d.MAC.String() != p.A.MAC.String() ||
		d.MTU != 1500 || !d.Up || d.MaxRxQueues != 2 || d.MaxTxQueues != 2 ||
		d.Queues != 2 || d.QueueSource != QueuesFromEthtool || d.Channels == nil ||
		d.XDPProgID != 0 || d.XDPMode != "" || d.Kind != "veth" || d.NetNS != ns {
		t.Fatalf("LookupDevice = %+v (pair %+v, netns %d)", d, p.A, ns)
	}
	for _, want := range []netip.Prefix{p.A.Addr, p.A.Addr6} {
		if !slices.Contains(d.Addrs, want) {
			t.Errorf("Addrs %v lack %s", d.Addrs, want)
		}
	}
	if !d.Addrs[0].Addr().Is4() {
		t.Errorf("Addrs %v: want IPv4 first", d.Addrs)
	}
	gids := GIDs(d)
	if len(gids) < 3 || gids[1] != netip.AddrFrom16(p.A.Addr.Addr().As16()) || !gids[0].IsLinkLocalUnicast() {
		t.Errorf("GIDs %v", gids)
	}
	t.Logf("%+v\nGIDs %v", d, gids)

	err = p.A.Do(func() error {
		_, err := LookupDevice("eth9")
		return err
	})
	if !errors.Is(err, ErrNoDevice) || err.Error() != `interface "eth9" not found` {
		t.Fatalf("LookupDevice(eth9): %v", err)
	}
	for _, bad := range []string{"", "a/b", "x y", ".."} {
		if _, err := LookupDevice(bad); err == nil || !strings.Contains(err.Error(), "invalid interface name") {
			t.Errorf("LookupDevice(%q): %v", bad, err)
		}
	}
}

func TestNetNSID(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{})
	id := func(h *netnstest.Host) uint64 {
		var v uint64
		if err := h.Do(func() (err error) { v, err = NetNSID(); return err }); err != nil {
			t.Fatal(err)
		}
		return v
	}
	a1, a2, b := id(p.A), id(p.A), id(p.B)
	host, err := NetNSID()
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 || a1 == b || a1 == host || b == host || a1 == 0 {
		t.Fatalf("NetNSID: A %d and %d, B %d, ours %d", a1, a2, b, host)
	}
}

func TestSetMTU(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{})
	err := p.A.Do(func() error {
		if err := SetMTU("eth0", 9000); err != nil {
			return err
		}
		d, err := LookupDevice("eth0")
		if err != nil {
			return err
		}
		if d.MTU != 9000 {
			return fmt.Errorf("MTU %d after SetMTU 9000", d.MTU)
		}
		if err := SetMTU("eth9", 9000); !errors.Is(err, ErrNoDevice) {
			return fmt.Errorf("SetMTU(eth9): %v", err)
		}
		if err := SetMTU("eth0", 1<<20); err == nil || !strings.HasPrefix(err.Error(), "setting MTU of eth0 to 1048576: ") {
			return fmt.Errorf("SetMTU(1 MiB): %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// neighbours lists h's neighbours, as `ip neigh show` does (every state
// but NOARP), on ifindex (0: all) for dst (the zero Addr: all).
func neighbours(t *testing.T, h *netnstest.Host, ifindex int, dst netip.Addr) []netlink.Neigh {
	t.Helper()
	var all []netlink.Neigh
	if err := h.Do(func() (err error) { all, err = netlink.NeighList(ifindex, netlink.FAMILY_ALL); return err }); err != nil {
		t.Fatal(err)
	}
	var shown []netlink.Neigh
	for _, n := range all {
		ip, _ := netip.AddrFromSlice(n.IP)
		if n.State&(0xff&^netlink.NUD_NOARP) != 0 && (!dst.IsValid() || ip.Unmap() == dst) {
			shown = append(shown, n)
		}
	}
	return shown
}

// flushNeigh empties h's neighbour tables, as `ip neigh flush all` does:
// every entry but permanent and NOARP ones.
func flushNeigh(t *testing.T, h *netnstest.Host) {
	t.Helper()
	err := h.Do(func() error {
		all, err := netlink.NeighList(0, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, n := range all {
			if n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
				continue
			}
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("deleting neighbour %s: %w", n.IP, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range neighbours(t, h, h.Index, netip.Addr{}) {
		if len(n.HardwareAddr) > 0 {
			t.Fatalf("neighbour table not empty: %s", n.String())
		}
	}
}

// addRoute adds r to h's main routing table.
func addRoute(t *testing.T, h *netnstest.Host, r *netlink.Route) {
	t.Helper()
	if err := h.Do(func() error { return netlink.RouteAdd(r) }); err != nil {
		t.Fatalf("adding route %s: %v", r, err)
	}
}

// addBridge adds a bridge to h, as `ip link add name NAME type bridge`.
func addBridge(t *testing.T, h *netnstest.Host, name string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := h.Do(func() error { return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: la}) }); err != nil {
		t.Fatalf("adding bridge %s: %v", name, err)
	}
}

// addTun adds a persistent tun device to h, as `ip tuntap add dev NAME
// mode tun` (no packet information header).
func addTun(t *testing.T, h *netnstest.Host, name string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	tun := &netlink.Tuntap{LinkAttrs: la, Mode: netlink.TUNTAP_MODE_TUN, Flags: netlink.TUNTAP_NO_PI}
	if err := h.Do(func() error { return netlink.LinkAdd(tun) }); err != nil {
		t.Fatalf("adding tun %s: %v", name, err)
	}
}

func prefix(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func TestResolve(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{})
	uses := 0
	neighUse = func(ifindex int, ip netip.Addr) error { uses++; return neighUseNetlink(ifindex, ip) }
	defer func() { neighUse = neighUseNetlink }()
	addRoute(t, p.A, &netlink.Route{Dst: prefix("203.0.113.0/24"), Gw: p.B.Addr.Addr().AsSlice()})
	for _, tc := range []struct {
		name          string
		dst, src, via netip.Addr // via: the destination when zero
		afterDAD      bool       // wait for DAD to end: NTF_USE must do
	}{
		{"ipv4", p.B.Addr.Addr(), p.A.Addr.Addr(), netip.Addr{}, false},
		{"ipv6", p.B.Addr6.Addr(), p.A.Addr6.Addr(), netip.Addr{}, false},
		{"gid", netip.AddrFrom16(p.B.Addr.Addr().As16()), p.A.Addr.Addr(), netip.Addr{}, false},
		{"gateway", netip.MustParseAddr("203.0.113.5"), p.A.Addr.Addr(), p.B.Addr.Addr(), false},
		{"ipv6-after-dad", p.B.Addr6.Addr(), p.A.Addr6.Addr(), netip.Addr{}, true},
		// The default GIDs are the kernel's EUI-64 link-local addresses.
		{"link-local", GIDs(&Device{MAC: p.B.MAC})[0].WithZone("eth0"), GIDs(&Device{MAC: p.A.MAC})[0], netip.Addr{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.afterDAD {
				waitDAD(t, p.A)
				waitDAD(t, p.B) // a tentative address does not answer
			}
			flushNeigh(t, p.A)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			uses = 0
			start := time.Now()
			var nh Nexthop
			if err := p.A.Do(func() (err error) { nh, err = Resolve(ctx, tc.dst); return err }); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("%s: %+v in %v (NTF_USE requests: %d)", tc.dst, nh, took, uses)
			via := tc.via
			if !via.IsValid() {
				via = tc.dst.Unmap().WithZone("")
			}
			if nh.MAC.String() != p.B.MAC.String() || nh.Src != tc.src || nh.Via != via || nh.Ifindex != p.A.Index {
				t.Fatalf("Resolve(%s) = %+v; want MAC %s src %s ifindex %d", tc.dst, nh, p.B.MAC, tc.src, p.A.Index)
			}
			if took > 500*time.Millisecond {
				t.Errorf("Resolve(%s) took %v on a veth", tc.dst, took)
			}
			if (tc.dst.Is4() || tc.afterDAD) && uses != 1 {
				t.Errorf("%d NTF_USE requests, want 1", uses)
			}
			ns := neighbours(t, p.A, 0, via)
			if !slices.ContainsFunc(ns, func(n netlink.Neigh) bool { return n.HardwareAddr.String() == p.B.MAC.String() }) {
				t.Fatalf("kernel neighbour table after Resolve: %v", ns)
			}
		})
	}
}

// waitDAD waits until h has no tentative IPv6 address.
func waitDAD(t *testing.T, h *netnstest.Host) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var tentative []netlink.Addr
		err := h.Do(func() error {
			l, err := netlink.LinkByName(h.Iface)
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
			for _, a := range addrs {
				if a.Flags&unix.IFA_F_TENTATIVE != 0 {
					tentative = append(tentative, a)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(tentative) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("DAD still running: %v", tentative)
		}
	}
}

// TestResolveUDPFallback resolves with the NTF_USE request refused, as for
// a caller without CAP_NET_ADMIN.
func TestResolveUDPFallback(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{})
	neighUse = func(int, netip.Addr) error { return os.ErrPermission }
	defer func() { neighUse = neighUseNetlink }()
	for _, dst := range []netip.Addr{p.B.Addr.Addr(), p.B.Addr6.Addr()} {
		flushNeigh(t, p.A)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var nh Nexthop
		err := p.A.Do(func() (err error) { nh, err = Resolve(ctx, dst); return err })
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if nh.MAC.String() != p.B.MAC.String() {
			t.Fatalf("Resolve(%s) = %+v, want MAC %s", dst, nh, p.B.MAC)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{})
	resolve := func(ctx context.Context, s string) error {
		return p.A.Do(func() error { _, err := Resolve(ctx, netip.MustParseAddr(s)); return err })
	}
	for _, r := range []struct {
		typ int
		dst string
	}{{unix.RTN_BLACKHOLE, "192.0.2.0/24"}, {unix.RTN_UNREACHABLE, "192.0.2.64/26"}, {unix.RTN_PROHIBIT, "192.0.2.128/26"}} {
		addRoute(t, p.A, &netlink.Route{Dst: prefix(r.dst), Type: r.typ})
	}
	for _, dst := range []string{"203.0.113.1", "2001:db8::1", "192.0.2.1", "192.0.2.65", "192.0.2.129"} {
		err := resolve(context.Background(), dst)
		if !errors.Is(err, ErrNoRoute) || err.Error() != "no route to "+dst {
			t.Errorf("Resolve(%s): %v, want no route", dst, err)
		}
	}
	if err := resolve(context.Background(), p.A.Addr.Addr().String()); err == nil || err.Error() != "198.18.0.1 is a local address" {
		t.Errorf("Resolve(own address): %v", err)
	}
	// On-link, nobody there: the timeout bounds the wait; without a
	// deadline the kernel's own give-up (3 probes, 1 s apart) ends it,
	// before ResolveTimeout.
	for _, tc := range []struct {
		dst, msg string
		timeout  time.Duration
	}{
		{"198.18.0.99", "198.18.0.99: neighbour unresolved (no ARP reply)", time.Second},
		{"fd00:198:18::99", "fd00:198:18::99: neighbour unresolved (no neighbour advertisement)", time.Second},
		{"198.18.0.98", "198.18.0.98: neighbour unresolved (no ARP reply)", 0},
	} {
		t.Run(tc.dst, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			start := time.Now()
			err := resolve(ctx, tc.dst)
			took := time.Since(start)
			if !errors.Is(err, ErrUnresolved) || err.Error() != tc.msg {
				t.Errorf("Resolve(%s): %v, want %q", tc.dst, err, tc.msg)
			}
			lo, hi := tc.timeout-100*time.Millisecond, tc.timeout+time.Second
			if tc.timeout == 0 {
				lo, hi = 2*time.Second, ResolveTimeout
			}
			if took < lo || took >= hi {
				t.Errorf("Resolve(%s) gave up after %v, want %v to %v", tc.dst, took, lo, hi)
			}
			t.Logf("%v after %v", err, took)
		})
	}
}

func TestEnsureBPFFS(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{})
	base := t.TempDir()
	t.Setenv(RunDirEnv, base)
	helper := func() (string, error) {
		cmd := p.A.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=bpffs")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// From ip netns exec's private mount namespace, with nothing mounted
	// on the host: refuse, since the mount would vanish with the process.
	out, err := helper()
	if err == nil || !strings.Contains(out, ErrEphemeralBPFFS.Error()) {
		t.Fatalf("helper in a private mount namespace: %v: %q, want %v", err, out, ErrEphemeralBPFFS)
	}
	// From the host's mount namespace: mount it, once, idempotently.
	for range 2 {
		if err := EnsureBPFFS(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = unix.Unmount(BPFRoot(), unix.MNT_DETACH) })
	if n := bpfMounts(BPFRoot()); n != 1 {
		t.Fatalf("%d bpf mounts on %s, want 1", n, BPFRoot())
	}
	// Now every ip netns exec shares the host's bpffs.
	out, err = helper()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "before=0xcafe4a11 after=0xcafe4a11 mounts=1"; out != want {
		t.Fatalf("helper: %q, want %q", out, want)
	}
}
