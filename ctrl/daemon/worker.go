package daemon

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/handoff"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/dataplane/xsk"
	"github.com/softfabric/softfabric/device"
)

// worker switches the frames of one queue between the NIC and the
// applications' rings for that queue. It runs to completion on a locked
// OS thread: no lock and no channel per frame.
type worker struct {
	d    *Daemon
	q    int
	sock *xsk.Socket
	efd  int // kick: another goroutine changed the application set
	pkt  wire.Packet

	views  [][]byte
	big    []byte // a multi-buffer frame being checked
	fds    []unix.PollFd
	fdsFor *[]*app

	passes atomic.Uint64
	txNext int // the application whose ring transmit visits first next pass
	c      workerCounters
	gsiPSN psn.PSN     // of the REJs the daemon sends from QP1
	lpkt   wire.Packet // a REJ for an application on this device
	looped bool        // this pass delivered a frame between applications

	// The last peer allowed (allowed), and the peer set (an application's,
	// never changed once published) it was found in: most frames go
	// where the one before went, and need no map lookup.
	okPeers *map[peerKey]struct{}
	okPeer  peerKey

	// parking are the applications with frames parked (park.go), kept
	// how many of the socket's spare chunks those hold.
	parking []*app
	kept    int
	keep    keeper // sock

	// in are the rings of the forwarders whose home it is (forward.go),
	// copy on write; asleep tells them to kick it.
	in     atomic.Pointer[[]*handoff.Ring]
	asleep atomic.Bool

	// Placement (place.go): the live expectations by QPN, how many,
	// and the time (ns since epoch) as of this pass, kept while any live.
	exp   map[uint32]*qpExpect
	nexp  int
	now   int64
	epoch time.Time
	// hands are the rings on which the other workers hand this one
	// expectations, by their queue (route.go); nil with one worker.
	hands []*handRing
}

type workerCounters struct {
	rx, tx, unknown, malformed, sleeps, stalls, ringFull, rejected, looped atomic.Uint64
	handed, handFull, handLate                                             atomic.Uint64 // expectations (route.go)
	parked                                                                 atomic.Uint64 // frames parked for a full ring (park.go)
	waiting                                                                atomic.Int64  // of those, not delivered yet
}

func newWorker(d *Daemon, q int, s *xsk.Socket) (*worker, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("daemon: eventfd: %w", err)
	}
	w := &worker{d: d, q: q, sock: s, keep: s, efd: efd, views: make([][]byte, link.IdealBatch), big: make([]byte, s.MaxFrame()),
		exp: map[uint32]*qpExpect{}, epoch: time.Now()}
	w.in.Store(&[]*handoff.Ring{})
	return w, nil
}

func (w *worker) close() { _ = unix.Close(w.efd) }

// kick wakes the worker if it sleeps.
func (w *worker) kick() {
	one := [8]byte{1}
	_, _ = unix.Write(w.efd, one[:])
}

// quiesce returns once the worker has begun a new pass after the call:
// it holds no application it dropped before (or has stopped).
func (w *worker) quiesce() {
	p := w.passes.Load()
	deadline := time.Now().Add(time.Second)
	for w.passes.Load() < p+2 && time.Now().Before(deadline) && w.d.ctx.Err() == nil {
		w.kick()
		time.Sleep(50 * time.Microsecond)
	}
}

func (w *worker) stats() daemonapi.WorkerStats {
	var kicks uint64
	if w.sock != nil { // tests make workers without one
		if x, err := w.sock.Stats(); err == nil {
			kicks = x.Kicks
		}
	}
	return daemonapi.WorkerStats{Kicks: kicks, Queue: w.q, RxFrames: w.c.rx.Load(), TxFrames: w.c.tx.Load(), Unknown: w.c.unknown.Load(),
		Malformed: w.c.malformed.Load(), Sleeps: w.c.sleeps.Load(), Passes: w.passes.Load(), TxStalls: w.c.stalls.Load(),
		RingFulls: w.c.ringFull.Load(), CMRejects: w.c.rejected.Load(), Looped: w.c.looped.Load(),
		ExpectationsHanded: w.c.handed.Load(), ExpectationsLate: w.c.handLate.Load() + w.c.handFull.Load(),
		Parked: w.c.parked.Load(), ParkedNow: uint64(max(w.c.waiting.Load(), 0))}
}

// Idle pacing: spin, then yield the CPU (sched_yield(2): the worker's
// thread is locked, so a Go yield would not let other processes run),
// then sleep in ppoll(2). The daemon shares the host's cores with the
// applications it serves, which poll too: on a small host (fewer than 8
// CPUs) it sleeps at once, and each frame costs a wake-up; on a larger
// one it polls for a while first (on 16 cores, 64 B round trips 1.6–3 µs
// above in process instead of 38 µs). SOFTFABRIC_DAEMON_SPIN and
// SOFTFABRIC_DAEMON_YIELD (empty passes) override the choice.
var (
	idleSpin  = envInt("SOFTFABRIC_DAEMON_SPIN", manyCores(20000, 0))
	idleYield = envInt("SOFTFABRIC_DAEMON_YIELD", 0)
)

// txBurst bounds the frames a worker takes from the applications' rings
// in a pass, and so sends in one kick (SOFTFABRIC_DAEMON_TXBURST), so
// that it looks at the NIC at least every txBurst frames sent. A kick
// pushes its frames through veth's transmit and the peer's XDP, about
// 1 µs a frame: with 64 frames a kick, the ACKs that come back during one
// waited up to 64 µs for the worker to pass them on, and an application
// with 128 writes in flight, having queued them all, waited with them
// (its worker idle about a tenth of the time). With 32 the application
// queues more while the worker sends: on 16 cores, 64 B writes through the
// daemon went from 0.84–0.86 to 1.00–1.02 times the rate in process;
// with 16, 0.87–0.98 (BENCHMARKS.md). At least 1: 0 would send nothing.
var txBurst = max(1, envInt("SOFTFABRIC_DAEMON_TXBURST", 32))

// manyCores is many on a host of 8 CPUs or more, else few.
func manyCores(many, few int) int {
	if runtime.NumCPU() >= 8 {
		return many
	}
	return few
}

const maxSleep = 100 * time.Millisecond

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

// lockThread locks the calling goroutine to its thread, and pins the
// thread to the CPU Config.CPUs gives queue q, if any: how a worker and a
// forwarder start.
func (d *Daemon) lockThread(q int) error {
	runtime.LockOSThread()
	if cpus := d.cfg.CPUs; len(cpus) > 0 {
		return device.PinCPU(cpus[q%len(cpus)])
	}
	return nil
}

// stopped reports whether done is closed, without blocking: a receive,
// no lock, unlike ctx.Err.
func stopped(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// pace is what an idle loop does after its idle-th empty pass: spin,
// then yield, then sleep.
func pace(idle int, sleep func()) {
	switch {
	case idle < idleSpin:
	case idle < idleSpin+idleYield:
		schedYield()
	default:
		sleep()
	}
}

func (w *worker) run(ctx context.Context) error {
	if err := w.d.lockThread(w.q); err != nil {
		return err
	}
	idle := 0
	for done := ctx.Done(); !stopped(done); {
		pass := w.passes.Add(1)
		if w.hands != nil {
			w.takeHanded()
		}
		if w.nexp > 0 {
			w.now = int64(time.Since(w.epoch))
			if pass%pruneEvery == 0 {
				w.pruneExpect(w.now)
			}
		}
		apps := w.d.apps.Load()
		did := len(w.parking) > 0 && w.unpark(*apps)
		if w.receive(*apps) {
			did = true
		}
		if w.forwarded(*apps) {
			did = true
		}
		// At most txBurst frames a pass, from the applications in turn,
		// starting one further each pass.
		if n := len(*apps); n > 0 {
			budget := txBurst
			for k := range n {
				taken := w.transmit((*apps)[(w.txNext+k)%n], budget)
				if taken > 0 {
					did = true
				}
				if budget -= taken; budget <= 0 {
					break
				}
			}
			w.txNext = (w.txNext + 1) % n
		}
		if w.looped {
			w.looped = false
			w.publish(*apps)
		}
		if err := w.sock.Flush(); err != nil {
			return err
		}
		if did {
			idle = 0
			continue
		}
		idle++
		pace(idle, func() { w.sleep(apps) })
	}
	return nil
}

// receive moves a batch from the NIC to the applications' rings. A
// frame for an application whose ring is full, or has frames parked
// before it, is parked (park.go), or dropped when the worker can park no
// more.
func (w *worker) receive(apps []*app) bool {
	n := w.sock.RecvZC(w.views)
	if n == 0 {
		return false
	}
	for i, f := range w.views[:n] {
		w.admit(i, f)
	}
	// Publish first: the applications wait for these frames, the kernel
	// has chunks to spare.
	w.publish(apps)
	w.c.rx.Add(uint64(n))
	w.sock.ReleaseRx()
	return true
}

// admit delivers frame f, or parks it (park.go) if its application's
// ring is full or has frames parked before it: frame i of the last
// receive, or, for i < 0, a frame a forwarder handed over. It drops the
// frame when the worker can park no more.
func (w *worker) admit(i int, f []byte) {
	if err := w.pkt.Parse(f); err != nil {
		w.c.malformed.Add(1)
		return
	}
	w.admitParsed(i, &w.pkt, f)
}

// admitParsed is admit for a frame parsed in p: i < 0 for one that is
// not in the NIC's ring (a forwarder's, or one looped back).
func (w *worker) admitParsed(i int, p *wire.Packet, f []byte) {
	a := w.ownerOf(p)
	if a == nil {
		return
	}
	if a.st[w.q].park.pending() == 0 && w.deliverTo(a, p, f) {
		return
	}
	if !w.park(a, i, f) {
		w.dropFull(a)
	}
}

// ownerOf returns the application that owns the destination queue pair
// of the frame parsed in p (for QP1, the one its RDMA-CM message is
// for), or nil, having counted the frame unknown (and answered an RDMA-CM
// request or DREQ nobody takes: answerUnrouted).
func (w *worker) ownerOf(p *wire.Packet) *app {
	qpn := p.BTH().DestQP()
	if qpn >= uint32(len(w.d.owner)) {
		w.c.unknown.Add(1)
		return nil
	}
	var a *app
	if qpn == engine.GSIQPN {
		if a = w.d.cm.Load().routeMAD(p.Payload); a == nil {
			w.answerUnrouted(p)
		}
	} else {
		a = w.d.owner[qpn].Load()
	}
	if a == nil {
		w.c.unknown.Add(1)
	}
	return a
}

// deliverTo hands frame f, parsed in p, to application a: its payload
// placed where the application expects it, or the frame copied whole
// onto the application's ring for this queue; a frame larger than a
// ring slot is dropped. The rings are published later, by publish. It
// reports false, having done nothing, when the ring is full.
func (w *worker) deliverTo(a *app, p *wire.Packet, f []byte) bool {
	e := a.ends[w.q]
	c := &a.st[w.q]
	buf := e.TxBuf()
	if buf == nil {
		return false
	}
	if len(f) > len(buf) {
		w.dropFull(a)
		return true
	}
	// Where an RC packet the application will see arrived (route.go):
	// not one dropped here, which the transport never sees.
	qpn := p.BTH().DestQP()
	if qpn != engine.GSIQPN && p.Info.Mask&wire.MaskDETH == 0 {
		w.arrived(qpn, p)
	}
	if w.nexp > 0 && w.place(a, e, buf, p, f) {
		c.newPlaced++
	} else {
		e.TxSubmit(copy(buf, f))
	}
	c.newRx++
	return true
}

// dropFull counts a frame for application a dropped for want of room.
func (w *worker) dropFull(a *app) {
	w.c.ringFull.Add(1)
	a.st[w.q].dropped.Add(1)
}

// publish makes the frames delivered to the applications' rings in this
// pass visible to them.
func (w *worker) publish(apps []*app) {
	for _, a := range apps {
		if c := &a.st[w.q]; c.newRx > 0 {
			_ = a.ends[w.q].Flush()
			c.rx.Add(c.newRx)
			if c.newPlaced > 0 {
				c.placed.Add(c.newPlaced)
			}
			c.newRx, c.newPlaced = 0, 0
		}
	}
}

// local reports whether the frame parsed in p is addressed to this
// device itself (its MAC and one of its addresses): a frame from one
// application on the device to another, or to itself, that the NIC would
// carry away and never bring back. The worker switches such frames
// between the rings, as a NIC's loopback does (and Linux's rxe, for a
// destination that is a local address).
func (w *worker) local(p *wire.Packet) bool {
	if p.Ethernet().Dst() != w.d.mac {
		return false
	}
	dst := p.Dst().Unmap()
	for _, g := range w.d.srcs {
		if g == dst {
			return true
		}
	}
	return false
}

// loop delivers frame c, which application a sent and which is parsed in
// w.pkt and addressed to this device, to the application it is for. Here
// the daemon knows both ends, so it checks more than the wire allows: an
// RC packet goes only to a queue pair connected to one of a's own (a may
// say it is connected to any queue pair, as to any peer on the wire, but
// cannot speak for another application's connection by guessing its
// PSN). What it may not send is counted as denied.
func (w *worker) loop(a *app, c []byte) {
	p := &w.pkt
	if p.Info.Mask&wire.MaskDETH == 0 {
		qpn := p.BTH().DestQP()
		if qpn < uint32(len(w.d.owner)) && !w.d.owner[qpn].Load().connectedTo(qpn, a, w.d.srcs, w.d.owner) {
			a.st[w.q].denied.Add(1)
			return
		}
	}
	a.st[w.q].tx.Add(1)
	w.loopBack(p, c)
}

// loopBack delivers frame f, parsed in p, which an application on this
// device (or the daemon for it) sent to the device itself, counting it
// looped, or parks a copy of it for a full ring; the rings are published
// after the applications' transmits.
func (w *worker) loopBack(p *wire.Packet, f []byte) {
	w.c.looped.Add(1)
	w.looped = true
	w.admitParsed(-1, p, f)
}

// transmit moves up to limit frames application a put on its ring for
// this queue to the NIC, dropping what it may not send, and returns how
// many it took from the ring. Each frame is copied out of the shared ring
// first and checked in the copy, which the application cannot change
// between the check and the send.
func (w *worker) transmit(a *app, limit int) int {
	room := min(w.sock.TxRoom(), len(w.views), limit)
	if room == 0 {
		w.c.stalls.Add(1)
		return 0
	}
	e := a.ends[w.q]
	n := e.RecvZC(w.views[:room])
	if n == 0 {
		return 0 // or its ring is corrupt: housekeep detaches it
	}
	peers := a.peers.Load()
	sent := 0
	for i, f := range w.views[:n] {
		if x, ok := e.Expectation(i); ok {
			if w.expect(a, &x, int64(time.Since(w.epoch))) {
				a.st[w.q].expects.Add(1)
			} else {
				a.st[w.q].badExpects.Add(1)
			}
			continue
		}
		if len(f) > w.sock.TxBufSize() || toMAC(f, w.d.mac) {
			// A multi-buffer frame, or one for this device itself:
			// checked in a private copy, then sent (copied again) by
			// Send or delivered to the application it is for.
			c, ok := w.frameOf(a, e, i, f, w.big)
			if !ok || !w.allowed(a, c, peers) {
				a.st[w.q].denied.Add(1)
				continue
			}
			if w.local(&w.pkt) {
				w.loop(a, c)
				continue
			}
			if k, _ := w.sock.Send([][]byte{c}); k == 1 {
				sent++
			}
			continue
		}
		buf := w.sock.TxBuf()
		if buf == nil {
			break // room was counted; a frame lost here is retransmitted
		}
		c, ok := w.frameOf(a, e, i, f, buf)
		if !ok || !w.allowed(a, c, peers) {
			a.st[w.q].denied.Add(1)
			w.sock.TxSubmit(0)
			continue
		}
		w.sock.TxSubmit(len(c))
		sent++
	}
	if sent > 0 {
		// The frames go before the bookkeeping (an error comes back
		// from the pass's own Flush).
		_ = w.sock.Flush()
	}
	e.ReleaseRx()
	w.c.tx.Add(uint64(sent))
	a.st[w.q].tx.Add(uint64(sent))
	return n
}

// toMAC reports whether Ethernet frame f is addressed to mac. It reads
// the application's ring, which may change under it: only a hint, checked
// again in the worker's copy.
func toMAC(f []byte, mac [6]byte) bool {
	return len(f) >= 6 && [6]byte(f[:6]) == mac
}

// frameOf copies frame f, view i of a's ring e, into dst (which holds
// it), and, when a said the frame's payload is to be gathered, copies the
// payload from a's shared region in its place: the frame as it will be
// sent, in memory a cannot change. It reports false for a payload outside
// a's regions or past the frame.
func (w *worker) frameOf(a *app, e *shmlink.End, i int, f, dst []byte) ([]byte, bool) {
	region, at, off, n, ok := e.Gathered(i)
	if !ok {
		return dst[:copy(dst, f)], true
	}
	mem := a.mem.Load()
	if mem == nil {
		return nil, false
	}
	reg, ok := (*mem)[region]
	end := uint64(at) + uint64(n)
	if !ok || end > uint64(len(f)) || off > uint64(len(reg)) || uint64(n) > uint64(len(reg))-off {
		return nil, false
	}
	copy(dst, f[:at])
	copy(dst[at:], reg[off:off+uint64(n)])
	copy(dst[end:], f[end:])
	a.st[w.q].gathered.Add(1)
	return dst[:len(f)], true
}

// allowed reports whether a may send frame f: RoCEv2 from the device's
// own MAC and addresses, and a UD request from one of its QPNs or an RC
// packet to a peer one of its queue pairs is connected to.
func (w *worker) allowed(a *app, f []byte, peers *map[peerKey]struct{}) bool {
	p := &w.pkt
	if err := p.Parse(f); err != nil {
		return false
	}
	if p.Ethernet().Src() != w.d.mac {
		return false
	}
	src := p.Src().Unmap()
	mine := false
	for _, g := range w.d.srcs {
		if g == src {
			mine = true
			break
		}
	}
	if !mine {
		return false
	}
	if p.Info.Mask&wire.MaskDETH != 0 {
		sq := p.DETH().SrcQP()
		if sq == engine.GSIQPN {
			return w.d.cm.Load().mayPostMAD(a, p.Payload)
		}
		return sq < uint32(len(w.d.owner)) && w.d.owner[sq].Load() == a
	}
	k := peerKey{p.Dst().Unmap(), p.BTH().DestQP()}
	if peers == w.okPeers && k == w.okPeer {
		return true
	}
	if _, ok := (*peers)[k]; !ok {
		return false
	}
	w.okPeers, w.okPeer = peers, k
	return true
}

// sleep blocks until the NIC or an application has frames for this
// worker, a kick, or maxSleep.
func (w *worker) sleep(apps *[]*app) {
	if w.fdsFor != apps {
		w.fds = w.fds[:0]
		w.fds = append(w.fds, unix.PollFd{Fd: int32(w.sock.FD()), Events: unix.POLLIN}, unix.PollFd{Fd: int32(w.efd), Events: unix.POLLIN})
		for _, a := range *apps {
			w.fds = append(w.fds, unix.PollFd{Fd: int32(a.ends[w.q].FD()), Events: unix.POLLIN})
		}
		w.fdsFor = apps
	}
	timeout := maxSleep
	if ready, t := w.sock.PrepareWait(timeout); ready {
		return
	} else {
		timeout = min(timeout, t)
	}
	for _, a := range *apps {
		if ready, _ := a.ends[w.q].PrepareWait(timeout); ready {
			return
		}
	}
	// After PrepareWait drained the doorbells: an application with
	// frames parked rings its doorbell when it makes room.
	for _, a := range w.parking {
		if a.ends[w.q].PrepareRoom(1) {
			return
		}
	}
	// After the flag, the last look at the forwarders' rings: one that
	// publishes after it sees the flag, and kicks.
	w.asleep.Store(true)
	defer w.asleep.Store(false)
	if w.waiting() {
		return
	}
	w.c.sleeps.Add(1)
	ts := unix.NsecToTimespec(int64(timeout))
	_, _ = unix.Ppoll(w.fds, &ts, nil)
	var drain [8]byte
	for i := 1; i < len(w.fds); i++ {
		if w.fds[i].Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(int(w.fds[i].Fd), drain[:])
		}
	}
}

// schedYield gives the CPU to another runnable thread, of any process.
func schedYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
