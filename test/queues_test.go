package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/xsk"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

var userSeq atomic.Uint32

// userPair makes two namespaces joined by a veth made the way users make
// one, in one command and with no queue counts:
//
//	ip link add name a netns A type veth peer name b netns B
//
// so with the kernel's defaults: a queue allocated per possible CPU, one
// in use. A has 198.19.8.1/24 on a, B 198.19.8.2/24 on b. It runs those
// very commands, so it needs ip(8).
func userPair(t *testing.T) *netnstest.Pair {
	t.Helper()
	netnstest.RequireIP(t)
	if err := ctrl.EnsureBPFFS(); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("sfu%d-%d", os.Getpid()%100000, userSeq.Add(1))
	p := &netnstest.Pair{
		A: &netnstest.Host{NS: id + "-a", Iface: "a", Addr: netip.MustParsePrefix("198.19.8.1/24")},
		B: &netnstest.Host{NS: id + "-b", Iface: "b", Addr: netip.MustParsePrefix("198.19.8.2/24")},
	}
	t.Cleanup(func() {
		for _, h := range []*netnstest.Host{p.A, p.B} {
			_, _ = netnstest.Run("ip", "netns", "del", h.NS)
		}
	})
	steps := [][]string{
		{"ip", "netns", "add", p.A.NS},
		{"ip", "netns", "add", p.B.NS},
		{"ip", "link", "add", "name", "a", "netns", p.A.NS, "type", "veth", "peer", "name", "b", "netns", p.B.NS},
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
		steps = append(steps,
			[]string{"ip", "-n", h.NS, "addr", "add", h.Addr.String(), "dev", h.Iface},
			[]string{"ip", "-n", h.NS, "link", "set", "dev", h.Iface, "up"},
			[]string{"ip", "-n", h.NS, "link", "set", "dev", "lo", "up"},
		)
	}
	for _, s := range steps {
		if _, err := netnstest.Run(s[0], s[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
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

// statusJSON is `softfabric status IFACE --json` in h.
func statusJSON(t *testing.T, h *netnstest.Host) map[string]any {
	t.Helper()
	var st []map[string]any
	if err := json.Unmarshal([]byte(mustSF(t, h, "status", h.Iface, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 {
		t.Fatalf("status: %+v", st)
	}
	return st[0]
}

// checkQueues checks status's queue facts.
func checkQueues(t *testing.T, h *netnstest.Host, queues, maxQueues, atUp, serves int) {
	t.Helper()
	st := statusJSON(t, h)
	if st["queues"] != float64(queues) || st["max_queues"] != float64(maxQueues) || st["queues_at_up"] != float64(atUp) ||
		st["serves"] != float64(serves) || st["queue_source"] != "ethtool" {
		t.Fatalf("status in %s: queues %v of %v (%v), %v at up, serves %v; want %d of %d (ethtool), %d at up, serves %d",
			h.NS, st["queues"], st["max_queues"], st["queue_source"], st["queues_at_up"], st["serves"], queues, maxQueues, atUp, serves)
	}
}

func allocated(t *testing.T, h *netnstest.Host) int {
	t.Helper()
	var d *ctrl.Device
	if err := h.Do(func() (err error) { d, err = ctrl.LookupDevice(h.Iface); return err }); err != nil {
		t.Fatal(err)
	}
	return d.MaxRxQueues
}

// TestUserVeth: the veth of the bug report, untouched, works: up, an RDMA
// write bandwidth run and a ping-pong. It used to fail with "AF_XDP socket
// on a queue 1: ... bind: invalid argument": the device bound a socket to
// every queue the veth allocated, not to the one it uses.
func TestUserVeth(t *testing.T) {
	p := userPair(t)
	up(t, p.A, p.B)
	alloc := allocated(t, p.A)
	t.Logf("a: 1 queue in use of %d allocated", alloc)
	checkQueues(t, p.A, 1, alloc, 1, 1)
	rs := perfPair(t, p, []string{"write"}, "write", "--size", "4096", "--iters", "2000")
	if len(rs) != 1 || rs[0]["iterations"].(float64) != 2000 || rs[0]["msg_rate_mpps"].(float64) <= 0 {
		t.Fatalf("perf write: %+v", rs)
	}
	c, s := pingpongPair(t, p, "-n", "200")
	for _, r := range []result{c, s} {
		if r.code != 0 || !strings.Contains(r.out, "1638400 bytes in ") || !strings.Contains(r.out, "200 iters in ") {
			t.Fatalf("pingpong: client %+v, server %+v", c, s)
		}
	}
}

// TestUpQueuesHint: up --queues above the queues in use is one line that
// says how to raise them, and leaves nothing behind.
func TestUpQueuesHint(t *testing.T) {
	p := userPair(t)
	alloc := allocated(t, p.A)
	if alloc < 2 {
		t.Skipf("a default veth allocates %d queue on this host: nothing to raise", alloc)
	}
	r := sf(p.A, "up", "a", "--queues", "2")
	want := fmt.Sprintf("softfabric: up: a has 1 active queue (%d allocated); --queues 2 needs more: raise them with 'ethtool -L a rx 2 tx 2'\n", alloc)
	if r.code != 1 || r.err != want || r.out != "" {
		t.Fatalf("up --queues 2: exit %d, stdout %q, stderr %q; want exit 1 and %q", r.code, r.out, r.err, want)
	}
	if left := leftovers(t, p.A); len(left) != 0 {
		t.Fatalf("a refused up left %v", left)
	}
}

// TestChannelsChangedWhileUp: channels raised after up (ethtool -L a rx 2
// tx 2 at both ends) show in status, and the next process that opens the
// device serves both queues, without a new up.
func TestChannelsChangedWhileUp(t *testing.T) {
	p := userPair(t)
	alloc := allocated(t, p.A)
	if alloc < 2 {
		t.Skipf("a default veth allocates %d queue on this host: nothing to raise", alloc)
	}
	// In process: the next process to open the device serves the new
	// queues (TestDaemonChannelsGrow: a daemon serves them as they come).
	upInProcess(t, p.A, p.B)
	checkQueues(t, p.A, 1, alloc, 1, 1)
	if err := bindQueue(p.B, 1); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("binding queue 1 of b, not in use: %v, want EINVAL", err)
	}
	raiseChannels(t, p)
	for _, h := range []*netnstest.Host{p.A, p.B} {
		checkQueues(t, h, 2, alloc, 1, 2)
	}
	text := mustSF(t, p.A, "status", "a")
	if want := fmt.Sprintf("\tqueues:\t\t\t2 active of %d allocated (ethtool; 1 at up: a newly opened device serves 2)\n", alloc); !strings.Contains(text, want) {
		t.Fatalf("status lacks %q:\n%s", want, text)
	}

	// A perf server in B holds the device: an AF_XDP socket on each queue.
	serr := perfWriteServer(t, p.B)
	// It holds both queues: a second socket on either is refused as busy
	// (where a socket on a queue not in use is invalid, as before the
	// change).
	for q := range 2 {
		if err := bindQueue(p.B, q); !errors.Is(err, unix.EBUSY) {
			t.Fatalf("binding queue %d of b beside the perf server: %v, want EBUSY (server: %s)", q, err, serr.String())
		}
	}
	rs := perfWriteFourQPs(t, p)
	// Four queue pairs over the two queues: both workers carried traffic,
	// the new queue too. (veth runs XDP on a queue added while attached
	// only after the classifier is attached again, which the device did
	// when it opened and recorded.)
	workers, _ := rs[0]["workers"].([]any)
	if len(workers) != 2 {
		t.Fatalf("workers: %+v", rs[0]["workers"])
	}
	for i, w := range workers {
		if m := w.(map[string]any); m["rx_frames"].(float64) == 0 || m["tx_frames"].(float64) == 0 {
			t.Fatalf("worker %d carried nothing: %+v", i, m)
		}
	}
	want := fmt.Sprintf("\tqueues:\t\t\t2 active of %d allocated (ethtool)\n", alloc)
	if text := mustSF(t, p.A, "status", "a"); !strings.Contains(text, want) {
		t.Fatalf("status after the device reopened lacks %q:\n%s", want, text)
	}
}

// bindQueue binds an AF_XDP socket (rx and tx rings, as the device's) to
// queue q of h's interface, and closes it again.
func bindQueue(h *netnstest.Host, q int) error {
	return h.Do(func() error {
		s, err := xsk.Open(xsk.Config{Ifindex: h.Index, Queue: q})
		if err == nil {
			s.Close()
		}
		return err
	})
}

// TestFourQueues: a veth made with four queues serves four, or fewer with
// up --queues.
func TestFourQueues(t *testing.T) {
	p := setup(t, netnstest.Options{Queues: 4}, false)
	if out := mustSF(t, p.A, "up", "eth0", "--queues", "2", "--no-daemon"); out != "softfabric: eth0 up: XDP native, 4 active queues (serving 2), MTU 1500, no daemon\n" {
		t.Fatalf("up --queues 2: %q", out)
	}
	if text := mustSF(t, p.A, "status", "eth0"); !strings.Contains(text, "\tqueues:\t\t\t4 active of 4 allocated (ethtool; --queues 2: a newly opened device serves 2)\n") {
		t.Fatalf("status after up --queues 2:\n%s", text)
	}
	mustSF(t, p.A, "down", "eth0")

	up(t, p.A, p.B)
	checkQueues(t, p.B, 4, 4, 4, 4)
	// Four queues: each application's rings have 512 slots, not 1024.
	if text := mustSF(t, p.B, "status", "eth0"); !strings.Contains(text, "\tqueues:\t\t\t4 active of 4 allocated (ethtool)\n") ||
		!strings.Contains(text, "\trings:\t\t512 slots of 4096 bytes, two a queue: 16.3 MiB an application\n") {
		t.Fatalf("status:\n%s", text)
	}
	rs := perfPair(t, p, []string{"write"}, "write", "--size", "4096", "--iters", "2000", "--qps", "4")
	if len(rs) != 1 || rs[0]["iterations"].(float64) != 2000 {
		t.Fatalf("perf write: %+v", rs)
	}
	// Four queue pairs on four queues: a worker each, every send received.
	// On veth in native mode what worker i sends arrives on the peer's
	// queue i, where the peer's worker i owns the queue pair: nothing is
	// handed over.
	rs = perfPair(t, p, []string{"send"}, "send", "--size", "1000", "--iters", "4000", "--qps", "4", "--cpus", "0")
	if len(rs) != 1 || rs[0]["iterations"].(float64) != 4000 || rs[0]["received"].(float64) != 4000 {
		t.Fatalf("perf send: %+v", rs)
	}
	workers, _ := rs[0]["workers"].([]any)
	if len(workers) != 4 {
		t.Fatalf("perf send: workers %+v", rs[0]["workers"])
	}
	for i, w := range workers {
		m := w.(map[string]any)
		if m["worker"].(float64) != float64(i) || m["tx_frames"].(float64) < 1000 || m["rx_frames"].(float64) == 0 || m["handed_in"].(float64) != 0 {
			t.Fatalf("worker %d: %+v", i, m)
		}
	}
	// The classifier counted what it redirected on each of the four
	// receive queues.
	var c struct {
		Redirected      uint64
		QueueRedirected []uint64
	}
	if err := json.Unmarshal([]byte(mustSF(t, p.B, "stats", "--json", "eth0")), &c); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for q, n := range c.QueueRedirected {
		if q < 4 && n < 1000 || q >= 4 && n != 0 {
			t.Fatalf("queue %d redirected %d: %+v", q, n, c.QueueRedirected[:8])
		}
		sum += n
	}
	if sum != c.Redirected {
		t.Fatalf("per-queue redirects add up to %d, not %d", sum, c.Redirected)
	}
	if text := mustSF(t, p.B, "stats", "eth0"); !strings.Contains(text, "\tqueue[3]_redirected") {
		t.Fatalf("stats:\n%s", text)
	}
}

// TestDaemonChannelsGrow: channels raised at both ends while b's daemon
// serves b (ethtool -L a rx 2 tx 2, the same at b): within a second the
// daemon serves the new queue too, through a forwarder to one of its
// workers, so that the flows the NIC now puts there still reach their
// applications, one attached before the change among them. The peer, a
// process that opens a in process after the change, sends on both queues
// (veth puts a frame on the receive queue of the transmit queue it went
// out on): a write run over four queue pairs completes, and frames arrive
// on b's new queue. Without the forwarder they die there (no socket) and
// the run ends in retry-exceeded.
func TestDaemonChannelsGrow(t *testing.T) {
	p := userPair(t)
	alloc := allocated(t, p.A)
	if alloc < 2 {
		t.Skipf("a default veth allocates %d queue on this host: nothing to raise", alloc)
	}
	upInProcess(t, p.A)
	up(t, p.B)
	// A perf server attached before the change.
	perfWriteServer(t, p.B)
	raiseChannels(t, p)
	forwarder := func() *daemonapi.WorkerStats {
		for _, w := range daemonStats(t, p.B).Workers {
			if w.Forwarder && w.Queue == 1 {
				return &w
			}
		}
		return nil
	}
	// Polled often: on veth the daemon attaches the classifier again
	// for the new queue, and status (as up, down and an application
	// opening the device) must wait through that moment, not call the
	// device down.
	for deadline := time.Now().Add(3 * time.Second); forwarder() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b's daemon does not serve queue 1 3 s after it came into use: %s", mustSF(t, p.B, "status", "b"))
		}
	}
	rs := perfWriteFourQPs(t, p)
	if workers, _ := rs[0]["workers"].([]any); len(workers) != 2 {
		t.Fatalf("the client's workers: %+v", rs[0]["workers"])
	}
	f := forwarder()
	t.Logf("b's queue 1: %d frames, %d dropped on the way to worker 0", f.RxFrames, f.RingFulls)
	if f.RxFrames == 0 {
		t.Fatalf("no frame arrived on b's new queue:\n%s", mustSF(t, p.B, "status", "b"))
	}
	if text := mustSF(t, p.B, "status", "b"); !strings.Contains(text, "forwarder[1] to worker[0]") {
		t.Fatalf("status lacks the forwarder:\n%s", text)
	}
}

// perfWriteServer starts `softfabric perf write` serving on h's interface
// and returns once it waits for a client (or after 5 s), with its
// standard error; the test's end kills it.
func perfWriteServer(t *testing.T, h *netnstest.Host) *syncbuf.Buffer {
	t.Helper()
	srv := h.Command(sfBin, "perf", "write", "--iface", h.Iface, "--json", "--timeout", "60s")
	serr := new(syncbuf.Buffer)
	srv.Stderr = serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return serr
}

// perfWriteFourQPs runs `softfabric perf write` from a to b (198.19.8.2)
// over four queue pairs, 2000 messages of 4 KiB, and returns its result
// after checking that every message went.
func perfWriteFourQPs(t *testing.T, p *netnstest.Pair) []map[string]any {
	t.Helper()
	out := mustSF(t, p.A, "perf", "write", "--iface", "a", "--json", "--timeout", "60s", "--size", "4096", "--iters", "2000", "--qps", "4", "198.19.8.2")
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rs) != 1 || rs[0]["iterations"].(float64) != 2000 {
		t.Fatalf("perf write after the channel change: %+v", rs)
	}
	return rs
}

// raiseChannels raises both ends of p's veth to two receive and two
// transmit queues, as ethtool -L a rx 2 tx 2 (and the same at b) does.
// With XDP attached at both ends, veth refuses a transmit count above the
// peer's receive count: receive first, then transmit.
func raiseChannels(t *testing.T, p *netnstest.Pair) {
	t.Helper()
	for _, step := range []struct {
		h      *netnstest.Host
		rx, tx uint32
	}{{p.A, 2, 0}, {p.B, 2, 0}, {p.A, 0, 2}, {p.B, 0, 2}} {
		if err := step.h.Do(func() error { return ctrl.SetChannels(step.h.Index, step.rx, step.tx, 0) }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForwarderParks: frames that a forwarder (a queue that came into
// use while the daemon ran) hands its worker for an application whose
// ring is full are parked, as copies, not dropped: the application,
// attached before the change and reading nothing meanwhile, gets them
// afterwards, in the order sent, up to what the worker can park.
func TestForwarderParks(t *testing.T) {
	p := userPair(t)
	if alloc := allocated(t, p.A); alloc < 2 {
		t.Skipf("a default veth allocates %d queue on this host: nothing to raise", alloc)
	}
	upInProcess(t, p.A)
	up(t, p.B)
	slow := open(t, p.B) // attached before the change: rings for worker 0 only
	raiseChannels(t, p)
	var fwd *daemonapi.WorkerStats
	for deadline := time.Now().Add(3 * time.Second); fwd == nil; time.Sleep(5 * time.Millisecond) {
		for _, w := range daemonStats(t, p.B).Workers {
			if w.Forwarder && w.Queue == 1 {
				fwd = &w
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's daemon does not serve queue 1 3 s after it came into use")
		}
	}
	sender := open(t, p.A) // in process, opened after the change: both queues
	const qkey, n = 0x2b, 3000
	qs, err := slow.d.NewUD(device.QPConfig{SendCQ: slow.scq, RecvCQ: slow.rcq, RQ: verbs.NewRecvQueue(4096)}, qkey)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4096 {
		if err := qs.PostRecv(&verbs.RecvWR{ID: uint64(i), SGL: sge(slow.buf, (i%1024)*512, 512)}); err != nil {
			t.Fatal(err)
		}
	}
	// Worker 1 sends on queue 1, which arrives on b's queue 1 (veth).
	qx, ah := udTo(t, sender, 1, qkey, slow.gid(), qs.QPN())
	buf := make([]verbs.Completion, 64)
	for sent, inflight := 0, 0; sent < n || inflight > 0; {
		for ; inflight < 32 && sent < n; sent, inflight = sent+1, inflight+1 {
			if err := qx.PostSend(&verbs.SendWR{Op: verbs.OpSendImm, Flags: verbs.Signaled, Imm: uint32(sent), Dest: ah, SGL: sge(sender.buf, 0, 256)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := sender.d.Progress(); err != nil {
			t.Fatal(err)
		}
		inflight -= sender.scq.Poll(buf)
		time.Sleep(20 * time.Microsecond) // under the veth's own drops
	}
	time.Sleep(200 * time.Millisecond)
	st := daemonStats(t, p.B)
	var parked, now, ringFull uint64
	for _, w := range st.Workers {
		parked, now, ringFull = parked+w.Parked, now+w.ParkedNow, ringFull+w.RingFulls
		if w.Forwarder && w.Queue == 1 {
			fwd = &w
		}
	}
	// Now it reads.
	var imms []uint32
	for idle := time.Now(); time.Since(idle) < 300*time.Millisecond; {
		if _, err := slow.d.Progress(); err != nil {
			t.Fatal(err)
		}
		for _, c := range buf[:slow.rcq.Poll(buf)] {
			if c.Status != verbs.Success {
				t.Fatalf("datagram: %v", c.Status)
			}
			imms = append(imms, c.Imm)
			idle = time.Now()
		}
	}
	t.Logf("%d datagrams sent on queue 1, %d through the forwarder; the worker parked %d (%d at once), dropped %d; the application got %d",
		n, fwd.RxFrames, parked, now, ringFull, len(imms))
	if fwd.RxFrames == 0 || parked == 0 {
		t.Fatalf("nothing came through the forwarder (%d) or nothing was parked (%d): the test tested nothing", fwd.RxFrames, parked)
	}
	for i := 1; i < len(imms); i++ {
		if imms[i] <= imms[i-1] {
			t.Fatalf("datagram %d arrived after %d", imms[i], imms[i-1])
		}
	}
	if uint64(len(imms)) < uint64(ringSlots)+now {
		t.Fatalf("the application got %d datagrams: fewer than its ring (%d) and what was parked for it (%d)", len(imms), ringSlots, now)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left := uint64(0)
		for _, w := range daemonStats(t, p.B).Workers {
			left += w.ParkedNow
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d frames still parked after the application read them all", left)
		}
	}
}
