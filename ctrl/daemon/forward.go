package daemon

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/handoff"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/xsk"
)

// A forwarder serves a queue the device came to use after the daemon
// started (its channels raised with ethtool -L while it runs): the NIC
// spreads flows over every queue in use, and a frame on a queue without a
// socket would die in the kernel's stack. The applications attached
// before have rings for the queues of the workers only, so the forwarder
// does not reach them itself: it copies each frame it receives into a
// handoff ring towards worker q mod n (its home, one ring per forwarder:
// a single producer and a single consumer), which delivers it as a frame
// of its own queue. Applications send on the workers' queues, as before.
// A frame so received costs one copy more than on a worker's queue; a
// restart (down, up) serves every queue with a worker again.
type forwarder struct {
	d    *Daemon
	q    int
	sock *xsk.Socket
	home *worker
	ring *handoff.Ring

	views  [][]byte
	fds    [1]unix.PollFd
	passes atomic.Uint64
	rx     atomic.Uint64
	sleeps atomic.Uint64
}

// forwardRing is the frames a forwarder's handoff ring holds.
const forwardRing = 1024

// grow serves the queues device dev (as housekeep just looked it up; nil
// after a netlink hiccup) came to use since the daemon started
// (device.Queues.Grow), each with a forwarder.
func (d *Daemon) grow(dev *ctrl.Device) error {
	if dev == nil {
		return nil
	}
	socks, err := d.q.Grow(dev)
	for _, s := range socks {
		f := &forwarder{d: d, q: s.Queue(), sock: s, home: d.workers[s.Queue()%len(d.workers)],
			ring: handoff.New(forwardRing, s.MaxFrame()), views: make([][]byte, link.IdealBatch)}
		f.fds = [1]unix.PollFd{{Fd: int32(s.FD()), Events: unix.POLLIN}}
		f.home.addForwarded(f.ring)
		fwd := append(append([]*forwarder(nil), *d.fwd.Load()...), f)
		d.fwd.Store(&fwd)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if err := f.run(d.ctx); err != nil && d.ctx.Err() == nil {
				d.fail(fmt.Errorf("forwarder of queue %d: %w", f.q, err))
			}
		}()
		d.logf("queue %d came into use: served, through worker %d", f.q, f.home.q)
	}
	return err
}

// run moves what the NIC delivers on the forwarder's queue to its home
// worker, until ctx ends.
func (f *forwarder) run(ctx context.Context) error {
	if err := f.d.lockThread(f.q); err != nil {
		return err
	}
	idle := 0
	for done := ctx.Done(); !stopped(done); {
		f.passes.Add(1)
		n := f.sock.RecvZC(f.views)
		if n > 0 {
			f.rx.Add(uint64(n))
			for _, v := range f.views[:n] {
				f.ring.Push(v) // a full ring drops it (counted): the transport sends it again
			}
			if f.ring.Publish() && f.home.asleep.Load() {
				f.home.kick()
			}
			f.sock.ReleaseRx()
			idle = 0
			continue
		}
		idle++
		pace(idle, f.sleep)
	}
	return nil
}

// sleep blocks until the NIC has frames for the forwarder or maxSleep.
func (f *forwarder) sleep() {
	if ready, _ := f.sock.PrepareWait(maxSleep); ready {
		return
	}
	f.sleeps.Add(1)
	ts := unix.NsecToTimespec(int64(maxSleep))
	_, _ = unix.Ppoll(f.fds[:], &ts, nil)
}

func (f *forwarder) stats() daemonapi.WorkerStats {
	return daemonapi.WorkerStats{Queue: f.q, RxFrames: f.rx.Load(), Sleeps: f.sleeps.Load(), Passes: f.passes.Load(),
		RingFulls: f.ring.Dropped(), Forwarder: true, Home: f.home.q}
}

// addForwarded makes the worker take the frames a forwarder hands it.
func (w *worker) addForwarded(r *handoff.Ring) {
	in := append(append([]*handoff.Ring(nil), *w.in.Load()...), r)
	w.in.Store(&in)
}

// forwarded delivers what the forwarders handed the worker, as frames of
// its own queue, and reports whether there was any.
func (w *worker) forwarded(apps []*app) bool {
	did := false
	for _, r := range *w.in.Load() {
		n := r.Peek(w.views)
		if n == 0 {
			continue
		}
		// Counted received by the forwarder. Frames for a full ring
		// are parked as copies.
		for _, f := range w.views[:n] {
			w.admit(-1, f)
		}
		w.publish(apps)
		r.Release()
		did = true
	}
	return did
}

// waiting reports whether a forwarder handed the worker frames it has not
// taken yet.
func (w *worker) waiting() bool {
	for _, r := range *w.in.Load() {
		if r.Len() > 0 {
			return true
		}
	}
	return false
}

// forwarderStats are the forwarders' figures, after the workers'.
func (d *Daemon) forwarderStats() []daemonapi.WorkerStats {
	var out []daemonapi.WorkerStats
	for _, f := range *d.fwd.Load() {
		out = append(out, f.stats())
	}
	return out
}
