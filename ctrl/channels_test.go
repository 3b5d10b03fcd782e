package ctrl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/internal/cpulist"
	"github.com/softfabric/softfabric/internal/netnstest"
)

func TestChannelsQueues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        Channels
		queues   int
		max      int
		combined bool
	}{
		{"default veth", Channels{MaxRx: 2, MaxTx: 2, Rx: 1, Tx: 1}, 1, 2, false},
		{"veth raised", Channels{MaxRx: 4, MaxTx: 4, Rx: 4, Tx: 4}, 4, 4, false},
		{"more rx than tx", Channels{MaxRx: 8, MaxTx: 8, Rx: 4, Tx: 2}, 2, 8, false},
		{"more tx than rx", Channels{MaxRx: 8, MaxTx: 8, Rx: 3, Tx: 5}, 3, 8, false},
		{"combined NIC", Channels{MaxCombined: 63, MaxOther: 1, Combined: 8, Other: 1}, 8, 63, true},
		{"combined and rx", Channels{MaxRx: 4, MaxCombined: 4, Rx: 2, Combined: 2}, 2, 4, false},
		{"combined and rx and tx", Channels{MaxRx: 4, MaxTx: 4, MaxCombined: 4, Rx: 1, Tx: 1, Combined: 2}, 3, 8, false},
		{"rx only", Channels{MaxRx: 4, Rx: 4}, 1, 1, false},
		{"nothing", Channels{}, 1, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Queues(); got != tc.queues {
				t.Errorf("%+v.Queues() = %d, want %d", tc.c, got, tc.queues)
			}
			if got := tc.c.MaxQueues(); got != tc.max {
				t.Errorf("%+v.MaxQueues() = %d, want %d", tc.c, got, tc.max)
			}
			if got := tc.c.IsCombined(); got != tc.combined {
				t.Errorf("%+v.IsCombined() = %v, want %v", tc.c, got, tc.combined)
			}
		})
	}
}

func TestChannelsDecode(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_CHANNELS_HEADER, func(nae *netlink.AttributeEncoder) error {
		nae.Uint32(unix.ETHTOOL_A_HEADER_DEV_INDEX, 7)
		nae.String(unix.ETHTOOL_A_HEADER_DEV_NAME, "eth0")
		return nil
	})
	for i, typ := range []uint16{
		unix.ETHTOOL_A_CHANNELS_RX_MAX, unix.ETHTOOL_A_CHANNELS_TX_MAX, unix.ETHTOOL_A_CHANNELS_OTHER_MAX,
		unix.ETHTOOL_A_CHANNELS_COMBINED_MAX, unix.ETHTOOL_A_CHANNELS_RX_COUNT, unix.ETHTOOL_A_CHANNELS_TX_COUNT,
		unix.ETHTOOL_A_CHANNELS_OTHER_COUNT, unix.ETHTOOL_A_CHANNELS_COMBINED_COUNT,
	} {
		ae.Uint32(typ, uint32(10+i))
	}
	ae.Uint32(99, 1) // from a newer kernel: ignored
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var c Channels
	if err := c.decode(b); err != nil {
		t.Fatal(err)
	}
	if want := (Channels{10, 11, 12, 13, 14, 15, 16, 17}); c != want {
		t.Fatalf("decoded %+v, want %+v", c, want)
	}
	if err := c.decode([]byte{1, 2, 3}); err == nil {
		t.Fatal("decoding a truncated attribute: no error")
	}
}

// sysfsTree writes a fake /sys/class/net/NAME: ifindex, address and the
// queue directories.
func sysfsTree(t *testing.T, root, name string, ifindex int, addr string, queues ...string) {
	t.Helper()
	dir := filepath.Join(root, name)
	for _, q := range queues {
		if err := os.MkdirAll(filepath.Join(dir, "queues", q), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"ifindex": strconv.Itoa(ifindex), "address": addr} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSysfsQueues(t *testing.T) {
	root := t.TempDir()
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	sysfsTree(t, root, "veth1", 5, "02:00:00:00:00:01", "rx-0", "tx-0")
	sysfsTree(t, root, "eth0", 2, "02:00:00:00:00:01", "rx-0", "rx-1", "rx-2", "rx-3", "tx-0", "tx-1", "tx-2", "tx-3", "rx-x", "bogus")
	sysfsTree(t, root, "eth1", 3, "02:00:00:00:00:01", "rx-0", "rx-1", "tx-0", "tx-1", "tx-2")
	sysfsTree(t, root, "tun0", 4, "", "rx-0", "tx-0")
	sysfsTree(t, root, "lo", 1, "00:00:00:00:00:00", "rx-0", "tx-0")
	sysfsTree(t, root, "noq", 6, "02:00:00:00:00:01")
	sysfsTree(t, root, "norx", 7, "02:00:00:00:00:01", "tx-0")
	for _, tc := range []struct {
		name    string
		ifindex int
		mac     net.HardwareAddr
		want    int
		err     string
	}{
		{"veth1", 5, mac, 1, ""},
		{"eth0", 2, mac, 4, ""},
		{"eth1", 3, mac, 2, ""},
		{"tun0", 4, nil, 1, ""},
		{"lo", 1, nil, 1, ""},
		{"lo", 1, net.HardwareAddr{0, 0, 0, 0, 0, 0}, 1, ""},
		// The host's sysfs seen from a namespace entered with setns: a
		// same-named interface that is another one.
		{"eth0", 9, mac, 0, "is another interface (ifindex 2, address 02:00:00:00:00:01)"},
		{"eth0", 2, net.HardwareAddr{2, 0, 0, 0, 0, 2}, 0, "is another interface"},
		{"tun0", 4, mac, 0, "is another interface"},
		{"gone0", 1, mac, 0, "no such file"},
		{"noq", 6, mac, 0, "no such file"},
		{"norx", 7, mac, 0, "lists 0 rx and 1 tx queues"},
	} {
		got, err := sysfsQueues(root, tc.name, tc.ifindex, tc.mac)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("sysfsQueues(%s, ifindex %d, %s) = %d, %v; want %d, %q", tc.name, tc.ifindex, tc.mac, got, err, tc.want, tc.err)
		}
	}
}

// defaultVeth makes a namespace with a veth made as users make one,
// `ip link add name a type veth peer name b`: no queue counts, so the
// kernel's defaults (one queue allocated per possible CPU, one in use).
// netnstest's Options{} sends the same request (its TestDefaultQueuesAsIP
// compares the two), without needing ip(8).
func defaultVeth(t *testing.T) *netnstest.Host {
	t.Helper()
	return netnstest.NewPair(t, netnstest.Options{}).A
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

func lookupIn(t *testing.T, h *netnstest.Host, iface string) *Device {
	t.Helper()
	var d *Device
	if err := h.Do(func() (err error) { d, err = LookupDevice(iface); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestQueuesDefaultVeth: a veth made without queue counts allocates a
// queue per possible CPU and uses one; Queues counts the one.
func TestQueuesDefaultVeth(t *testing.T) {
	t.Parallel()
	h := defaultVeth(t)
	alloc := min(possibleCPUs(t), 4096)
	d := lookupIn(t, h, h.Iface)
	want := Channels{MaxRx: uint32(alloc), MaxTx: uint32(alloc), Rx: 1, Tx: 1}
	if d.Queues != 1 || d.MaxRxQueues != alloc || d.MaxTxQueues != alloc || d.QueueSource != QueuesFromEthtool ||
		d.Channels == nil || *d.Channels != want {
		t.Fatalf("default veth: queues %d (%s), allocated %d/%d, channels %+v; want 1 (ethtool), %d/%d, %+v",
			d.Queues, d.QueueSource, d.MaxRxQueues, d.MaxTxQueues, d.Channels, alloc, alloc, want)
	}
}

func TestQueuesFourQueueVeth(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{Queues: 4})
	d := lookupIn(t, p.A, p.A.Iface)
	if d.Queues != 4 || d.MaxRxQueues != 4 || d.MaxTxQueues != 4 || d.QueueSource != QueuesFromEthtool {
		t.Fatalf("4-queue veth: queues %d (%s), allocated %d/%d, channels %+v", d.Queues, d.QueueSource, d.MaxRxQueues, d.MaxTxQueues, d.Channels)
	}
}

func TestSetChannels(t *testing.T) {
	t.Parallel()
	h := defaultVeth(t)
	d := lookupIn(t, h, h.Iface)
	if d.MaxRxQueues < 2 {
		t.Skipf("a default veth allocates %d queue on this host: nothing to raise", d.MaxRxQueues)
	}
	set := func(rx, tx, combined uint32) error {
		return h.Do(func() error { return SetChannels(d.Index, rx, tx, combined) })
	}
	read := func() Channels {
		t.Helper()
		var c Channels
		if err := h.Do(func() (err error) { c, err = ReadChannels(d.Index); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, n := range []uint32{2, 1} {
		if err := set(n, n, 0); err != nil {
			t.Fatal(err)
		}
		if c := read(); c.Rx != n || c.Tx != n || c.Combined != 0 {
			t.Fatalf("channels after SetChannels(rx %d, tx %d): %+v", n, n, c)
		}
		if d := lookupIn(t, h, h.Iface); d.Queues != int(n) {
			t.Fatalf("Queues %d after SetChannels(rx %d, tx %d)", d.Queues, n, n)
		}
		if out, err := h.Exec("ls", "/sys/class/net/"+h.Iface+"/queues"); err != nil || strings.Count(out, "rx-") != int(n) {
			t.Fatalf("sysfs queues after SetChannels(rx %d, tx %d): %v %q", n, n, err, out)
		}
	}
	// Only the counts given change.
	if err := set(2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if c := read(); c.Rx != 2 || c.Tx != 1 {
		t.Fatalf("channels after SetChannels(rx 2): %+v", c)
	}
	if d := lookupIn(t, h, h.Iface); d.Queues != 1 {
		t.Fatalf("Queues %d with rx 2 tx 1: an AF_XDP socket with a tx ring binds queue 0 only", d.Queues)
	}
	over := uint32(d.MaxRxQueues) + 1
	err := set(over, 0, 0)
	if !errors.Is(err, unix.EINVAL) || !strings.HasPrefix(err.Error(), fmt.Sprintf("setting channels of ifindex %d (rx %d, tx 0, combined 0): ", d.Index, over)) {
		t.Fatalf("SetChannels above the maximum: %v", err)
	}
	t.Log(err)
	if err := set(0, 0, 0); err == nil || !strings.Contains(err.Error(), "no count given") {
		t.Fatalf("SetChannels(0, 0, 0): %v", err)
	}
	var rerr error
	_ = h.Do(func() error { _, rerr = ReadChannels(1 << 30); return nil })
	if rerr == nil || errors.Is(rerr, ErrNoChannels) {
		t.Fatalf("ReadChannels of a missing ifindex: %v", rerr)
	}
}

// TestQueuesNoChannels: a bridge has no get_channels. ReadChannels says
// so, matchably, and LookupDevice counts the queues in sysfs when the sysfs
// on /sys is this namespace's (ip netns exec), and falls back to queue 0
// when it is the host's (a thread that entered the namespace with setns).
// A tun has combined channels: as many as file descriptors attached, and
// queue 0 even with none.
func TestQueuesNoChannels(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{})
	addBridge(t, p.A, "sfbr0")
	d := lookupIn(t, p.A, "sfbr0")
	var err error
	_ = p.A.Do(func() error { _, err = ReadChannels(d.Index); return nil })
	if !errors.Is(err, ErrNoChannels) || !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("ReadChannels(bridge): %v, want ErrNoChannels and EOPNOTSUPP", err)
	}
	if want := fmt.Sprintf("reading channels of ifindex %d: driver reports no channels (operation not supported)", d.Index); err.Error() != want {
		t.Fatalf("ReadChannels(bridge): %q, want %q", err, want)
	}
	if d.Queues != 1 || d.QueueSource != QueuesFromDefault || d.Channels != nil || d.MaxRxQueues != 1 {
		t.Fatalf("bridge through setns: queues %d (%s), channels %v, allocated %d", d.Queues, d.QueueSource, d.Channels, d.MaxRxQueues)
	}
	helper := func(iface string) string {
		t.Helper()
		cmd := p.A.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=queues", helperIfaceEnv+"="+iface)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper for %s: %v: %s", iface, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got, want := helper("sfbr0"), "queues=1 source=sysfs max=1/1 channels=<nil>"; got != want {
		t.Fatalf("bridge through ip netns exec: %q, want %q", got, want)
	}
	if got, want := helper("lo"), "queues=1 source=sysfs max=1/1 channels=<nil>"; got != want {
		t.Fatalf("lo through ip netns exec: %q, want %q", got, want)
	}
	// The veth beside them through ip netns exec: ethtool, as through setns.
	if got := helper(p.A.Iface); !strings.HasPrefix(got, "queues=1 source=ethtool max=") {
		t.Fatalf("veth through ip netns exec: %q", got)
	}

	addTun(t, p.A, "sftun0")
	d = lookupIn(t, p.A, "sftun0")
	if d.Queues != 1 || d.QueueSource != QueuesFromEthtool || d.Channels == nil || !d.Channels.IsCombined() {
		t.Fatalf("tun: queues %d (%s), channels %+v", d.Queues, d.QueueSource, d.Channels)
	}
}
