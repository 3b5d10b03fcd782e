package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/internal/netnstest"
)

// Real-kernel tests: the classifier attached to a veth in a network
// namespace, with traffic from the peer namespace.

// bpffs mounts a private bpf filesystem for the test's pins.
func bpffs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// xdpOf returns the XDP state of h's interface as the netlink package
// (not ours) reads it, in the words of `ip link show`: "" when no program
// is attached, else the mode word and the id, e.g. "xdpgeneric/id:42" or
// "xdp/id:42" (native).
func xdpOf(t *testing.T, h *netnstest.Host) string {
	t.Helper()
	x, err := h.XDP()
	if err != nil {
		t.Fatal(err)
	}
	if !x.Attached {
		return ""
	}
	mode, ok := map[uint32]string{
		nl.XDP_ATTACHED_DRV: "xdp", nl.XDP_ATTACHED_SKB: "xdpgeneric",
		nl.XDP_ATTACHED_HW: "xdpoffload", 4: "xdpmulti", // XDP_ATTACHED_MULTI
	}[x.AttachMode]
	if !ok {
		mode = fmt.Sprintf("xdp(mode %d)", x.AttachMode)
	}
	return fmt.Sprintf("%s/id:%d", mode, x.ProgId)
}

// sendBTH sends n UDP datagrams from a to b:4791 whose payload is a BTH for
// destination QP qpn, 16 bytes of payload and an ICRC slot: RoCEv2 frames
// as far as the classifier can tell (it does not check the ICRC).
func sendBTH(t *testing.T, a, b *netnstest.Host, qpn uint32, n int) {
	t.Helper()
	msg := make([]byte, wire.BTHSize+16+wire.ICRCSize)
	wire.BTH(msg).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: qpn})
	err := a.Do(func() error {
		// Unconnected, so that the ICMP errors for frames a rule passes
		// to the kernel (nothing listens on 4791) fail no later write.
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		to := &net.UDPAddr{IP: b.Addr.Addr().AsSlice(), Port: wire.UDPPort}
		for range n {
			if _, err := c.WriteTo(msg, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pingAndTCP checks that ordinary traffic from a to b still works.
func pingAndTCP(t *testing.T, a, b *netnstest.Host) {
	t.Helper()
	if out, err := a.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", b.Addr.Addr().String()); err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	if out, err := a.Exec("ping", "-6", "-c", "1", "-W", "2", b.Addr6.Addr().String()); err != nil {
		t.Fatalf("ping -6: %v\n%s", err, out)
	}
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.Addr.Addr().String(), "7000"))
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
	var got []byte
	if err := a.Do(func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(b.Addr.Addr().String(), "7000"), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		got = make([]byte, 5)
		_, err = c.Read(got)
		return err
	}); err != nil {
		t.Fatalf("tcp: %v", err)
	}
	if string(got) != "hello" {
		t.Fatalf("tcp: got %q", got)
	}
}

// waitCounters polls until cond holds for the counters, which the kernel
// updates as frames arrive on the other side of the veth.
func waitCounters(t *testing.T, c *Classifier, what string, cond func(Counters) bool) Counters {
	t.Helper()
	var n Counters
	for deadline := time.Now().Add(3 * time.Second); ; {
		var err error
		if n, err = c.Counters(); err != nil {
			t.Fatal(err)
		}
		if cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: counters %+v", what, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedirectTestRun completes the verdict table: with an AF_XDP socket in
// the XSKMAP the classifier returns XDP_REDIRECT, for the queue the socket
// is on only.
func TestRedirectTestRun(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{Queues: 2})
	for _, vr := range variants {
		t.Run(vr.name, func(t *testing.T) {
			c := load(t, vr.o)
			if err := c.SetRule(0, Rule{Units: []MatchUnit{{Offset: offBTHDestQP, Mask: 0xffffff, Value: 0x77}}, Action: ActionRedirect, Context: 15}); err != nil {
				t.Fatal(err)
			}
			err := p.B.Do(func() error {
				for _, s := range []struct{ ctx, queue int }{{1, 1}, {15, 0}} {
					fd, err := xskSocket(t, p.B.Index, s.queue)
					if err != nil {
						return err
					}
					if err := c.SetSocket(s.ctx, s.queue, fd); err != nil {
						return err
					}
				}
				for _, tc := range []struct {
					name    string
					queue   uint32
					frame   []byte
					verdict uint32
					want    Counters
				}{
					{"qp on queue 1", 1, roce{qpn: 0x11}.frame(t), xdpRedirect, Counters{Redirected: 1, QueueRedirected: [MaxQueues]uint64{1: 1}}},
					{"qp on queue 1 ipv6 vlan", 1, roce{v6: true, vlan: true, qpn: 0x11}.frame(t), xdpRedirect, Counters{Redirected: 1, QueueRedirected: [MaxQueues]uint64{1: 1}}},
					{"qp on queue 0", 0, roce{qpn: 0x11}.frame(t), xdpDrop, Counters{NoSocket: 1}},
					{"rule on queue 0", 0, roce{qpn: 0x77}.frame(t), xdpRedirect, Counters{Redirected: 1, RuleHits: [MaxRules]uint64{1}, QueueRedirected: [MaxQueues]uint64{0: 1}}},
					{"rule on queue 1", 1, roce{qpn: 0x77}.frame(t), xdpDrop, Counters{NoSocket: 1, RuleHits: [MaxRules]uint64{1}}},
					{"arp on queue 1", 1, arpFrame(t), xdpPass, Counters{Passed: 1}},
				} {
					if err := c.ResetCounters(); err != nil {
						return err
					}
					md := xdpMD{DataEnd: uint32(len(tc.frame)), IngressIfindex: uint32(p.B.Index), RxQueueIndex: tc.queue}
					v, err := c.Program().Run(&ebpf.RunOptions{Data: tc.frame, Context: md})
					if err != nil {
						return fmt.Errorf("%s: %w", tc.name, err)
					}
					got, err := c.Counters()
					if err != nil {
						return err
					}
					if v != tc.verdict || got != tc.want {
						t.Errorf("%s: %s %+v, want %s %+v", tc.name, verdictName(v), got, verdictName(tc.verdict), tc.want)
					}
				}
				if err := c.DeleteSocket(1, 1); err != nil {
					return err
				}
				frame := roce{qpn: 0x11}.frame(t)
				v, err := c.Program().Run(&ebpf.RunOptions{Data: frame, Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(p.B.Index), RxQueueIndex: 1}})
				if err != nil || v != xdpDrop {
					t.Errorf("after DeleteSocket: %s, %v", verdictName(v), err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// xdpMD is struct xdp_md, the context BPF_PROG_TEST_RUN takes; DataEnd
// must be the frame's length.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

func TestAttach(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		want Mode
		o    Options
	}{
		{ModeGeneric, ModeGeneric, Options{}},
		{ModeNative, ModeNative, Options{}},
		{ModeAuto, ModeNative, Options{}},
		{ModeNative, ModeNative, Options{Frags: true}},
		{ModeGeneric, ModeGeneric, Options{Frags: true}},
	} {
		name := tc.mode.String()
		if tc.o.Frags {
			name += "-frags"
		}
		t.Run(name, func(t *testing.T) {
			p := netnstest.NewPair(t, netnstest.Options{Queues: 2})
			c := load(t, tc.o)
			var got Mode
			if err := p.B.Do(func() (err error) {
				got, err = c.Attach(p.B.Index, tc.mode)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("attached in %s mode, want %s", got, tc.want)
			}
			id, err := c.ProgramID()
			if err != nil {
				t.Fatal(err)
			}
			wantIP := fmt.Sprintf("xdp/id:%d", id)
			if got == ModeGeneric {
				wantIP = fmt.Sprintf("xdpgeneric/id:%d", id)
			}
			if x := xdpOf(t, p.B); x != wantIP {
				t.Fatalf("the link shows %q, want %q", x, wantIP)
			}
			if err := p.B.Do(func() error {
				qid, qmode, err := XDPProgram(p.B.Index)
				if err == nil && (qid != id || qmode != got) {
					err = fmt.Errorf("XDPProgram = %d %s, want %d %s", qid, qmode, id, got)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if ifindex, ok := c.Attached(); !ok || ifindex != p.B.Index {
				t.Fatalf("Attached = %d, %v", ifindex, ok)
			}

			pingAndTCP(t, p.A, p.B)
			n := waitCounters(t, c, "ping and tcp passed", func(n Counters) bool { return n.Passed >= 10 })
			t.Logf("after ping and tcp: %+v", n)

			// RoCE to an unknown QP is dropped.
			if err := c.ResetCounters(); err != nil {
				t.Fatal(err)
			}
			sendBTH(t, p.A, p.B, 0x4242, 50)
			n = waitCounters(t, c, "unknown qpn", func(n Counters) bool { return n.UnknownQPN == 50 })
			if n.Redirected+n.NoSocket+n.BadPKey+n.BadVersion+n.Short != 0 {
				t.Errorf("unknown qpn: counters %+v", n)
			}
			t.Logf("after 50 frames to an unknown qp: %+v", n)

			// To a known QP without a socket, then with one on each
			// queue: the frames reach the socket (and are dropped there,
			// its fill ring being empty).
			if err := c.SetQP(0x4242, 2); err != nil {
				t.Fatal(err)
			}
			sendBTH(t, p.A, p.B, 0x4242, 10)
			waitCounters(t, c, "no socket", func(n Counters) bool { return n.NoSocket == 10 })
			var fds [2]int
			if err := p.B.Do(func() error {
				for q := range fds {
					var err error
					if fds[q], err = xskSocket(t, p.B.Index, q); err != nil {
						return err
					}
					if err := c.SetSocket(2, q, fds[q]); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			sendBTH(t, p.A, p.B, 0x4242, 20)
			n = waitCounters(t, c, "redirected", func(n Counters) bool { return n.Redirected == 20 })
			if got := xskReceived(t, fds[0]) + xskReceived(t, fds[1]); got != 20 {
				t.Errorf("sockets saw %d frames, want 20", got)
			}
			t.Logf("after 20 frames to a qp with sockets: %+v", n)

			if err := c.Detach(); err != nil {
				t.Fatal(err)
			}
			if x := xdpOf(t, p.B); x != "" {
				t.Fatalf("after Detach the link shows %q", x)
			}
		})
	}
}

// TestAlreadyAttached checks that a second classifier, or anything else,
// on the interface is refused with ErrAlreadyAttached naming the program,
// whatever the modes.
func TestAlreadyAttached(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{Queues: 2})
	first := load(t, Options{})
	second := load(t, Options{})
	firstID, _ := first.ProgramID()
	attach := func(c *Classifier, m Mode) (err error) {
		p.B.Do(func() error {
			_, err = c.Attach(p.B.Index, m)
			return nil
		})
		return err
	}
	for _, m1 := range []Mode{ModeGeneric, ModeNative} {
		if err := attach(first, m1); err != nil {
			t.Fatal(err)
		}
		for _, m2 := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
			err := attach(second, m2)
			if !errors.Is(err, ErrAlreadyAttached) {
				t.Fatalf("%s over %s: %v", m2, m1, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("(id %d, %s)", firstID, m1)) {
				t.Errorf("%s over %s: %v", m2, m1, err)
			}
		}
		if err := attach(first, m1); err == nil || errors.Is(err, ErrAlreadyAttached) {
			t.Errorf("attaching twice: %v", err)
		}
		if err := first.Detach(); err != nil {
			t.Fatal(err)
		}
	}

	// A program attached the old way, through netlink, by someone else:
	// with netlink calls, and by ip(8) loading the object file itself.
	obj, err := filepath.Abs("classifier_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	setXDP := func(fd int) error {
		return p.B.Do(func() error {
			l, err := netlink.LinkByName(p.B.Iface)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, fd, nl.XDP_FLAGS_SKB_MODE)
		})
	}
	for _, foreign := range []struct {
		name           string
		attach, detach func(t *testing.T)
	}{
		{
			"netlink",
			func(t *testing.T) {
				if err := setXDP(load(t, Options{}).Program().FD()); err != nil {
					t.Fatalf("attaching through netlink: %v", err)
				}
			},
			func(t *testing.T) {
				if err := setXDP(-1); err != nil {
					t.Fatalf("detaching through netlink: %v", err)
				}
			},
		},
		{
			"ip",
			func(t *testing.T) {
				netnstest.RequireIP(t)
				if out, err := p.B.Exec("ip", "link", "set", "dev", p.B.Iface, "xdpgeneric", "obj", obj, "sec", "xdp"); err != nil {
					t.Fatalf("ip link set xdpgeneric: %v\n%s", err, out)
				}
			},
			func(t *testing.T) {
				if out, err := p.B.Exec("ip", "link", "set", "dev", p.B.Iface, "xdpgeneric", "off"); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
			},
		},
	} {
		t.Run(foreign.name, func(t *testing.T) {
			foreign.attach(t)
			var id uint32
			p.B.Do(func() (err error) { id, _, err = XDPProgram(p.B.Index); return err })
			err := attach(second, ModeAuto)
			if !errors.Is(err, ErrAlreadyAttached) || id == 0 || !strings.Contains(err.Error(), fmt.Sprintf("(id %d, generic)", id)) {
				t.Fatalf("over %s's program %d: %v", foreign.name, id, err)
			}
			t.Logf("over %s's program: %v", foreign.name, err)
			foreign.detach(t)
			if err := attach(second, ModeAuto); err != nil {
				t.Fatalf("after %s removed its program: %v", foreign.name, err)
			}
			if err := second.Detach(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPinOpenRemove(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{Queues: 2})
	dir := filepath.Join(bpffs(t), "softfabric", "eth0")
	c := load(t, Options{})
	if err := c.Pin(dir); err != nil {
		t.Fatal(err)
	}
	// Attaching after Pin pins the link too.
	if err := p.B.Do(func() error { _, err := c.Attach(p.B.Index, ModeNative); return err }); err != nil {
		t.Fatal(err)
	}
	id, _ := c.ProgramID()
	if err := c.SetRule(4, Rule{Units: []MatchUnit{{Offset: offBTHDestQP, Mask: 0xffffff, Value: 0x99}}, Action: ActionPass}); err != nil {
		t.Fatal(err)
	}
	sendBTH(t, p.A, p.B, 0x4242, 5)
	waitCounters(t, c, "before open", func(n Counters) bool { return n.UnknownQPN == 5 })

	// The loader goes away; the program stays attached.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if x := xdpOf(t, p.B); x != fmt.Sprintf("xdp/id:%d", id) {
		t.Fatalf("after Close the link shows %q", x)
	}

	o, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if oid, err := o.ProgramID(); err != nil || oid != id {
		t.Fatalf("opened program %d, %v; want %d", oid, err, id)
	}
	if ifindex, ok := o.Attached(); !ok || ifindex != p.B.Index {
		t.Fatalf("opened Attached = %d, %v", ifindex, ok)
	}
	n, err := o.Counters()
	if err != nil || n.UnknownQPN != 5 {
		t.Fatalf("opened counters %+v, %v", n, err)
	}
	if rules, err := o.Rules(); err != nil || len(rules) != 1 || rules[4].Action != ActionPass {
		t.Fatalf("opened rules %+v, %v", rules, err)
	}
	if pk, err := o.PKeys(); err != nil || len(pk) != 1 || pk[0] != 0xffff {
		t.Fatalf("opened p_keys %v, %v", pk, err)
	}
	// A second process adds its QP.
	if err := o.SetQP(0x4242, 0); err != nil {
		t.Fatal(err)
	}
	sendBTH(t, p.A, p.B, 0x4242, 3)
	sendBTH(t, p.A, p.B, 0x99, 2)
	n = waitCounters(t, o, "after open", func(n Counters) bool { return n.NoSocket == 3 && n.RuleHits[4] == 2 })
	t.Logf("counters read through the pins: %+v", n)
	if _, err := o.Attach(p.B.Index, ModeGeneric); err == nil {
		t.Fatal("opened classifier attached a second time")
	}
	// Attached again (what a device does after a veth's channels grew):
	// the same program, a new pinned link, the maps and counters kept.
	if err := p.B.Do(func() error { return o.Reattach(ModeNative) }); err != nil {
		t.Fatal(err)
	}
	if x := xdpOf(t, p.B); x != fmt.Sprintf("xdp/id:%d", id) {
		t.Fatalf("after Reattach the link shows %q", x)
	}
	sendBTH(t, p.A, p.B, 0x99, 1)
	waitCounters(t, o, "after reattach", func(n Counters) bool { return n.RuleHits[4] == 3 })
	if r, err := Open(dir); err != nil {
		t.Fatal(err)
	} else if ifindex, ok := r.Attached(); !ok || ifindex != p.B.Index {
		t.Fatalf("reopened after Reattach: Attached = %d, %v", ifindex, ok)
	} else {
		r.Close()
	}
	for _, m := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		if got, err := ParseMode(m.String()); got != m || err != nil {
			t.Fatalf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("offload"); err == nil {
		t.Fatal("ParseMode took offload")
	}

	// Another reader, as `softfabric status` would be.
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if qps, err := s.QPs(); err != nil || qps[0x4242] != 0 || qps[0x11] != 1 {
		t.Fatalf("status qps %v, %v", qps, err)
	}
	s.Close()

	// Remove detaches although o still holds the link open.
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if x := xdpOf(t, p.B); x != "" {
		t.Fatalf("after Remove the link shows %q", x)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Remove: %v", err)
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Fatal("Open after Remove succeeded")
	}
	pingAndTCP(t, p.A, p.B)

	// A fresh classifier can take the interface again.
	c2 := load(t, Options{})
	if err := p.B.Do(func() error { _, err := c2.Attach(p.B.Index, ModeAuto); return err }); err != nil {
		t.Fatalf("attach after Remove: %v", err)
	}
}

func TestPinNeedsBPFFS(t *testing.T) {
	c := load(t, Options{})
	if err := c.Pin(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		t.Fatalf("Pin on tmpfs: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil {
		t.Fatal("Open of an empty directory succeeded")
	}
}

// TestJumboAttach: on a 9000-byte MTU veth native XDP needs the xdp.frags
// variant; ModeAuto falls back to generic for the plain one.
func TestJumboAttach(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.Options{Queues: 2, MTU: 9000})
	attach := func(c *Classifier, m Mode) (got Mode, err error) {
		p.B.Do(func() error {
			got, err = c.Attach(p.B.Index, m)
			return nil
		})
		return got, err
	}
	plain := load(t, Options{})
	if _, err := attach(plain, ModeNative); err == nil || !strings.Contains(err.Error(), "Options.Frags") {
		t.Fatalf("plain variant, native, mtu 9000: %v", err)
	} else {
		t.Logf("plain variant, native, mtu 9000: %v", err)
	}
	if got, err := attach(plain, ModeAuto); err != nil || got != ModeGeneric {
		t.Fatalf("plain variant, auto, mtu 9000: %s, %v", got, err)
	}
	if err := plain.Detach(); err != nil {
		t.Fatal(err)
	}

	c := load(t, Options{Frags: true})
	if got, err := attach(c, ModeAuto); err != nil || got != ModeNative {
		t.Fatalf("frags variant, auto, mtu 9000: %s, %v", got, err)
	}
	msg := make([]byte, wire.BTHSize+8000+wire.ICRCSize)
	wire.BTH(msg).Encode(&wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x4243})
	if err := p.A.Do(func() error {
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		for range 5 {
			if _, err := c.WriteTo(msg, &net.UDPAddr{IP: p.B.Addr.Addr().AsSlice(), Port: wire.UDPPort}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n := waitCounters(t, c, "jumbo frames", func(n Counters) bool { return n.UnknownQPN == 5 })
	t.Logf("after 5 jumbo frames: %+v", n)
	pingAndTCP(t, p.A, p.B)
}
