package test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// loopTotals sums what h's daemon's workers switched between its
// applications and sent to the NIC.
func loopTotals(t *testing.T, h *netnstest.Host) (looped, tx uint64) {
	t.Helper()
	for _, w := range daemonStats(t, h).Workers {
		looped += w.Looped
		tx += w.TxFrames
	}
	return looped, tx
}

// TestDaemonLoopback: applications on one device reach each other at the
// device's own address, as they do on a kernel RDMA device (Linux's rxe
// loops such packets back; a NIC's loopback does the same): two
// applications, and one application's two queue pairs, run every RC
// operation and UD datagrams with the data checked, on a veth made with
// plain `ip link add` and nothing at its other end. The daemon switches
// the frames between the rings and sends none of them to the NIC. A
// device opened in process loops them back itself.
// An application cannot use the loopback to speak for another's
// connection.
func TestDaemonLoopback(t *testing.T) {
	p := userPair(t)
	up(t, p.A)
	one, two := open(t, p.A), open(t, p.A)
	if !one.d.Attached() || !two.d.Attached() {
		t.Fatal("the devices are not attached to the daemon")
	}
	looped0, tx0 := loopTotals(t, p.A)

	t.Run("two-applications", func(t *testing.T) {
		checkRCOps(t, one, two, 0, 0)
		checkUD(t, one, two)
	})
	t.Run("one-application", func(t *testing.T) {
		// Two queue pairs of one application connected to each other.
		checkRCOps(t, one, selfEnd(t, one), 0, 0)
	})
	t.Run("placed-read", func(t *testing.T) {
		// A read into shared memory: its responses, looped back by the
		// daemon, are placed straight into it, as from the wire.
		mem, free, err := one.d.AllocMemory(2 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer free()
		shared, err := one.d.MRs().Register(mem, all)
		if err != nil {
			t.Fatal(err)
		}
		fill(two.buf.Bytes()[:1<<20], 11)
		qa, _ := rcPair(t, one, two, verbs.NewRecvQueue(4), verbs.NewRecvQueue(4))
		before := placedFrames(t, p.A)
		wr := verbs.SendWR{Op: verbs.OpRead, Flags: verbs.Signaled, SGL: sge(shared, 100, 1<<20), RemoteAddr: two.buf.Addr(), RKey: two.buf.RKey(), ID: 1}
		if err := qa.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if c := poll(t, one, two, one.scq, 1)[0]; c.Status != verbs.Success {
			t.Fatalf("read: %+v", c)
		}
		if !bytes.Equal(mem[100:100+1<<20], two.buf.Bytes()[:1<<20]) {
			t.Fatal("the read's data differs")
		}
		if placed := placedFrames(t, p.A) - before; placed == 0 {
			t.Fatal("no response of a looped-back read was placed")
		}
	})

	t.Run("spoofing", func(t *testing.T) {
		// Applications one and three are connected; two connects a queue
		// pair of its own to one's and sends with the very PSN one's
		// expects, under a leaked rkey of one's memory. The daemon knows
		// who sent it and that one's queue pair is three's: it drops
		// them all, counted as denied, and one's memory stays as it was.
		three := open(t, p.A)
		const psn1, psn3 = 100, 300
		rcq := func(e *end) *rc.QP {
			q, err := e.d.NewRC(device.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, RQ: verbs.NewRecvQueue(4), SQDepth: 16}, all)
			if err != nil {
				t.Fatal(err)
			}
			return q
		}
		q1, q2, q3 := rcq(one), rcq(two), rcq(three)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		connect := func(e *end, q *rc.QP, psn uint32, peer *rc.QP, peerPSN uint32, o device.ConnectOptions) {
			if err := p.A.Do(func() error {
				return e.d.ConnectRC(ctx, q, psn, device.Remote{QPN: peer.QPN(), PSN: peerPSN, GID: e.gid()}, o)
			}); err != nil {
				t.Fatal(err)
			}
		}
		connect(one, q1, psn1, q3, psn3, device.ConnectOptions{})
		connect(three, q3, psn3, q1, psn1, device.ConnectOptions{})
		connect(two, q2, psn3, q1, psn1, device.ConnectOptions{Timeout: 8, RetryCnt: 1})
		ends := []*end{one, two, three}
		denied := appsDenied(t, p.A)
		target := one.buf.Bytes()[3<<20 : 3<<20+64]
		fill(target, 5)
		mark := bytes.Clone(target)
		fill(two.buf.Bytes()[:64], 6)
		wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(two.buf, 0, 64), RemoteAddr: one.buf.Addr() + 3<<20, RKey: one.buf.RKey(), ID: 7}
		if err := q2.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if c := pollAll(t, ends, two.scq, 1)[0]; c.Status == verbs.Success {
			t.Fatal("application two's write into one's connection completed")
		}
		if !bytes.Equal(target, mark) {
			t.Fatal("application two wrote into one's memory through one's connection with three")
		}
		if d := appsDenied(t, p.A) - denied; d == 0 {
			t.Fatal("the daemon denied none of two's frames")
		}
		// Three, whose connection it is, writes there.
		fill(three.buf.Bytes()[:64], 8)
		wr = verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(three.buf, 0, 64), RemoteAddr: one.buf.Addr() + 3<<20, RKey: one.buf.RKey(), ID: 8}
		if err := q3.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if c := pollAll(t, ends, three.scq, 1)[0]; c.Status != verbs.Success {
			t.Fatalf("three's write: %+v", c)
		}
		if !bytes.Equal(target, three.buf.Bytes()[:64]) {
			t.Fatal("three's write did not land")
		}
	})

	looped, tx := loopTotals(t, p.A)
	t.Logf("the daemon looped %d frames back, sent %d", looped-looped0, tx-tx0)
	if looped-looped0 < 100 {
		t.Fatalf("the daemon looped back %d frames", looped-looped0)
	}
	if tx != tx0 {
		t.Fatalf("%d frames between applications of one device went to the NIC", tx-tx0)
	}

	t.Run("in-process", func(t *testing.T) {
		// A device opened in process loops its frames back itself.
		upInProcess(t, p.B)
		b := open(t, p.B)
		checkLoopbackInProcess(t, b, 0, 0)
	})
}

// selfEnd is a second set of CQs and memory on e's device, for queue
// pairs connected to e's.
func selfEnd(t *testing.T, e *end) *end {
	t.Helper()
	self := &end{h: e.h, d: e.d, scq: verbs.NewCQ(8192), rcq: verbs.NewCQ(8192)}
	var err error
	if self.buf, err = e.d.MRs().Register(make([]byte, 4<<20), all); err != nil {
		t.Fatal(err)
	}
	return self
}

// checkLoopbackInProcess runs every RC operation between queue pairs on
// workers wa and wb of b, a device opened in process, and UD datagrams,
// and checks that b looped them back itself; an address of the host that
// is not the device's (lo's) is refused with ErrNoLoopback.
func checkLoopbackInProcess(t *testing.T, b *end, wa, wb int) {
	t.Helper()
	if b.d.Attached() {
		t.Fatal("the device is attached to a daemon")
	}
	self := selfEnd(t, b)
	checkRCOps(t, b, self, wa, wb)
	checkUD(t, b, self)
	looped, dropped := b.d.Looped()
	t.Logf("in process: %d frames looped back, %d dropped", looped, dropped)
	if looped < 100 {
		t.Fatalf("the device looped back %d frames", looped)
	}
	q, err := b.d.NewRC(device.QPConfig{SendCQ: b.scq, RecvCQ: b.rcq, RQ: verbs.NewRecvQueue(4)}, all)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = b.h.Do(func() error {
		return b.d.ConnectRC(ctx, q, 1, device.Remote{QPN: q.QPN(), PSN: 1, GID: netip.MustParseAddr("::ffff:127.0.0.1")}, device.ConnectOptions{})
	})
	if !errors.Is(err, device.ErrNoLoopback) {
		t.Fatalf("connecting to lo's address: %v, want ErrNoLoopback", err)
	}
}

// TestDaemonLoopbackQueues: on a device of two queues and a 9000-byte MTU
// (frames larger than an AF_XDP buffer), the queue pairs of two
// applications on different workers reach each other: the daemon loops a
// frame back on the queue it was sent on, and the receiving application
// hands it to the worker that owns its queue pair. The same in process.
func TestDaemonLoopbackQueues(t *testing.T) {
	p := setup(t, netnstest.Options{Queues: 2, MTU: 9000}, false)
	up(t, p.A)
	one, two := open(t, p.A), open(t, p.A)
	if one.d.Workers() != 2 {
		t.Fatalf("%d workers, want 2", one.d.Workers())
	}
	checkRCOps(t, one, two, 0, 1)
	checkRCOps(t, two, one, 0, 1)
	looped := uint64(0)
	for _, w := range daemonStats(t, p.A).Workers {
		if w.Looped == 0 {
			t.Errorf("worker %d looped nothing back", w.Queue)
		}
		looped += w.Looped
	}
	t.Logf("%d frames looped back", looped)

	upInProcess(t, p.B)
	checkLoopbackInProcess(t, open(t, p.B), 0, 1)
}

// TestPerfLoopback: `softfabric perf` server and client as two processes
// on one host, the client given the host's own address, the way a user
// tries a device first: every operation completes, through the daemon's
// loopback, at its IPv4 address and its IPv6 link-local one, and RDMA-CM
// connects there too (perftest's -R exchange, rping, udaddy), or refuses
// a port nobody listens on at once.
func TestPerfLoopback(t *testing.T) {
	p := userPair(t)
	up(t, p.A)
	self := &netnstest.Pair{A: p.A, B: p.A}
	looped0, _ := loopTotals(t, p.A)
	for _, op := range []string{"write", "read", "send", "atomic"} {
		rs := perfPair(t, self, []string{op}, op, "--iters", "500")
		if len(rs) != 1 || rs[0]["op"] != op {
			t.Fatalf("%s: %v", op, rs)
		}
	}
	// At the device's IPv6 link-local address (its first GID), zone and
	// all, as rdma-core's tools take one.
	var ll netip.Addr
	if err := p.A.Do(func() error {
		ifc, err := net.InterfaceByName(p.A.Iface)
		if err != nil {
			return err
		}
		addrs, err := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && ip.IsLinkLocalUnicast() {
					ll = ip.WithZone(p.A.Iface)
				}
			}
		}
		return err
	}); err != nil || !ll.IsValid() {
		t.Fatalf("no link-local address on %s: %v", p.A.Iface, err)
	}
	srv := p.A.Command(sfBin, "perf", "write", "--iface", p.A.Iface, "--port", "18612", "--timeout", "60s")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var r6 result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// Until the server listens, and the address is no longer
		// tentative (duplicate address detection, about a second after
		// the link came up): "cannot assign requested address".
		r6 = sf(p.A, "perf", "write", "--iface", p.A.Iface, "--port", "18612", "--iters", "300", "--timeout", "60s", ll.String())
		if r6.code == 0 || time.Now().After(deadline) || !strings.Contains(r6.err, "refused") && !strings.Contains(r6.err, "cannot assign") {
			break
		}
	}
	if r6.code != 0 {
		t.Fatalf("perf write to %v: %+v", ll, r6)
	}

	sout, serr, done := startServer(t, p.A, "perf", "write", "--perftest-server", "--rdma-cm", "--iface", p.A.Iface, "--port", "18611", "--iters", "300", "--timeout", "60s")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	c := sf(p.A, "perf", "write", "--perftest", p.A.Addr.Addr().String(), "--rdma-cm", "--iface", p.A.Iface, "--port", "18611", "--iters", "300", "--timeout", "60s")
	code := -1
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the perftest server did not finish; client %+v; server %s%s", c, sout.String(), serr.String())
	}
	if c.code != 0 || code != 0 {
		t.Fatalf("perftest over RDMA-CM: client %+v; server (%d) %s%s", c, code, sout.String(), serr.String())
	}

	// librdmacm's tools: rping's reads and writes of checked data (-V),
	// udaddy's UD queue pairs resolved by SIDR, and a request for a port
	// nobody listens on, refused at once.
	host := p.A.Addr.Addr().String()
	_, rerr, rdone := startServer(t, p.A, "rping", "-s", "--iface", p.A.Iface)
	var r result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		// rping's server says nothing when it listens: try until it does.
		r = sfWithin(t, p.A, 30*time.Second, "rping", "-c", "-a", host, "-C", "20", "-V", "--iface", p.A.Iface)
		if r.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.code != 0 {
		t.Fatalf("rping client: %+v; server: %s", r, rerr.String())
	}
	if code := waitExit(t, rdone, new(syncbuf.Buffer), rerr); code != 0 {
		t.Fatalf("rping server: exit %d: %s", code, rerr.String())
	}
	opts := []string{"-c", "2", "-C", "20", "-S", "500"}
	uout, uerr, udone := startServer(t, p.A, append([]string{"udaddy", "--iface", p.A.Iface}, opts...)...)
	waitAttached(t, p.A)
	if r := sfWithin(t, p.A, 30*time.Second, append([]string{"udaddy", "-s", host, "--iface", p.A.Iface}, opts...)...); r.code != 0 {
		t.Fatalf("udaddy client: %+v; server: %s%s", r, uout.String(), uerr.String())
	}
	if code := waitExit(t, udone, uout, uerr); code != 0 {
		t.Fatalf("udaddy server: exit %d: %s%s", code, uout.String(), uerr.String())
	}
	start := time.Now()
	if r := sfWithin(t, p.A, 20*time.Second, "ucmatose", "-s", host, "-p", "7176", "--iface", p.A.Iface); r.code == 0 || !strings.Contains(r.err, "REJECTED") || time.Since(start) > 5*time.Second {
		t.Fatalf("ucmatose to a port nobody listens on, after %v: %+v", time.Since(start), r)
	}

	if looped, _ := loopTotals(t, p.A); looped == looped0 {
		t.Fatal("nothing was looped back")
	}
}
