// Package netnstest builds test hosts out of network namespaces joined by
// veth pairs, for tests that need a real kernel data path: XDP, AF_XDP,
// tc, neighbours and routes. Addresses come from 198.18.0.0/15 only, inside
// namespaces the test creates and removes.
//
// Tests that need root or ip(8) call Require, which skips with the reason
// when they are missing and fails instead under CI=true, so that a CI run on
// a capable machine never skips the real-kernel tests silently.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

// Require skips t unless it runs as root with ip(8) available; under
// CI=true it fails instead of skipping.
func Require(t testing.TB) {
	t.Helper()
	var why string
	switch {
	case os.Geteuid() != 0:
		why = "needs root to create network namespaces"
	default:
		if _, err := exec.LookPath("ip"); err != nil {
			why = "needs ip(8) from iproute2"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (a skip is a failure under CI=true)", why)
	}
	t.Skip(why)
}

// Host is one end of a pair: a network namespace with one veth.
type Host struct {
	NS    string       // namespace name, for ip netns exec
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
	// Queues is the number of rx and tx queues of each veth (default 1).
	Queues int
	// MTU of both veths (default 1500).
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
// 198.18.0.1/24 and 198.18.0.2/24 (fd00:198:18::1/64 and ::2) and removes
// them when the test ends. Interface names are eth0 in both namespaces, as
// on real hosts.
func NewPair(t testing.TB, o Options) *Pair {
	t.Helper()
	return newPair(t, o, false)
}

func newPair(t testing.TB, o Options, wired bool) *Pair {
	t.Helper()
	Require(t)
	if o.Queues == 0 {
		o.Queues = 1
	}
	if o.MTU == 0 {
		o.MTU = 1500
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
	t.Cleanup(func() {
		for _, h := range hosts {
			_, _ = Run("ip", "netns", "del", h.NS)
		}
	})
	tmpA, tmpB := id+"a", id+"b"
	q := fmt.Sprint(o.Queues)
	steps := [][]string{
		{"ip", "netns", "add", p.A.NS},
		{"ip", "netns", "add", p.B.NS},
	}
	if !wired {
		steps = append(steps,
			[]string{"ip", "link", "add", tmpA, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", tmpB, "numtxqueues", q, "numrxqueues", q},
			[]string{"ip", "link", "set", tmpA, "netns", p.A.NS},
			[]string{"ip", "link", "set", tmpB, "netns", p.B.NS},
		)
	} else {
		w := p.Wire.NS
		mtu := fmt.Sprint(o.MTU)
		steps = append(steps,
			[]string{"ip", "netns", "add", w},
			[]string{"ip", "link", "add", tmpA, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", p.WireA, "numtxqueues", q, "numrxqueues", q},
			[]string{"ip", "link", "add", tmpB, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", p.WireB, "numtxqueues", q, "numrxqueues", q},
			[]string{"ip", "link", "set", tmpA, "netns", p.A.NS},
			[]string{"ip", "link", "set", tmpB, "netns", p.B.NS},
			[]string{"ip", "link", "set", p.WireA, "netns", w},
			[]string{"ip", "link", "set", p.WireB, "netns", w},
			[]string{"ip", "-n", w, "link", "add", "br0", "type", "bridge"},
			[]string{"ip", "-n", w, "link", "set", p.WireA, "master", "br0", "mtu", mtu, "up"},
			[]string{"ip", "-n", w, "link", "set", p.WireB, "master", "br0", "mtu", mtu, "up"},
			[]string{"ip", "-n", w, "link", "set", "br0", "mtu", mtu, "up"},
		)
	}
	for _, h := range []struct {
		h   *Host
		tmp string
	}{{p.A, tmpA}, {p.B, tmpB}} {
		ns := []string{"ip", "-n", h.h.NS}
		steps = append(steps,
			append(ns[:3:3], "link", "set", h.tmp, "name", h.h.Iface),
			append(ns[:3:3], "link", "set", h.h.Iface, "mtu", fmt.Sprint(o.MTU)),
			append(ns[:3:3], "addr", "add", h.h.Addr.String(), "dev", h.h.Iface),
			append(ns[:3:3], "addr", "add", h.h.Addr6.String(), "dev", h.h.Iface, "nodad"),
			append(ns[:3:3], "link", "set", h.h.Iface, "up"),
			append(ns[:3:3], "link", "set", "lo", "up"),
		)
	}
	for _, s := range steps {
		if _, err := Run(s[0], s[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []*Host{p.A, p.B} {
		err := h.Do(func() error {
			ifc, err := net.InterfaceByName(h.Iface)
			if err != nil {
				return err
			}
			h.MAC, h.Index = ifc.HardwareAddr, ifc.Index
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Do runs fn on an OS thread switched into the host's namespace. Sockets
// fn creates belong to that namespace and may be used from any goroutine
// afterwards.
func (h *Host) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never switched back: it ends with the goroutine
		// (LockOSThread without Unlock), so no other goroutine can run in
		// the wrong namespace.
		runtime.LockOSThread()
		target, err := netns.GetFromName(h.NS)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", h.NS, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("entering netns %s: %w", h.NS, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Command returns a command that runs inside the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Exec runs a command inside the host's namespace and returns its output.
func (h *Host) Exec(name string, args ...string) (string, error) {
	out, err := h.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s %s: %w: %s", h.NS, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ErrNotRoot is returned by helpers that need root.
var ErrNotRoot = errors.New("netnstest: not root")
