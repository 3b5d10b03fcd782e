package fabric

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/softfabric/softfabric/device"
)

// Domain is one softfabric device opened by this process: its queues and
// workers, memory regions, and the endpoints, completion queues, counters
// and address vectors made on it.
type Domain struct {
	fab     *Fabric
	info    Info
	dev     *device.Device
	refs    refs
	safe    bool
	manual  bool
	workers []*worker
	next    atomic.Uint32

	// epMu guards the workers' endpoint lists (copy on write) and
	// serialises endpoint creation.
	epMu sync.Mutex

	cancel  context.CancelFunc
	stopped chan struct{}
	runErr  error

	// gone is set once the device failed under the domain (ErrDeviceGone).
	gone atomic.Pointer[error]
	// overruns counts completions lost on full CQs, for the device's
	// transport statistics.
	overruns atomic.Uint64

	// cms is the domain's RDMA-CM connection manager, once started.
	cmMu sync.Mutex
	cms  *cmService
}

// worker is the fabric's side of a device worker: the endpoints it
// serves and control work queued for it.
type worker struct {
	d   *Domain
	id  int
	eps atomic.Pointer[[]servicer]

	// progMu serialises manual progress of the worker (TryLock: a
	// goroutine that finds it taken leaves progress to the holder) and
	// control work on it.
	progMu sync.Mutex

	ctlMu      sync.Mutex
	ctl        []ctlReq
	ctlPending atomic.Bool
	goneOnce   sync.Once
}

type ctlReq struct {
	f    func() error
	done chan error
}

// Domain opens the device of info (from GetInfo) and starts its workers
// when progress is automatic.
func (f *Fabric) Domain(info *Info) (*Domain, error) {
	if info == nil {
		return nil, fmt.Errorf("%w: no info", ErrInvalid)
	}
	if info.Provider != f.provider {
		return nil, fmt.Errorf("%w: info of provider %q on a %q fabric", ErrInvalid, info.Provider, f.provider)
	}
	if d := f.adopt(info); d != nil {
		return d, nil
	}
	if err := f.refs.add(); err != nil {
		return nil, err
	}
	dev, err := info.device()
	if err != nil {
		f.refs.done()
		return nil, fmt.Errorf("opening domain %s: %w", info.Domain.Name, err)
	}
	d := &Domain{fab: f, info: *info, dev: dev, safe: info.Domain.Threading != ThreadDomain,
		manual: info.Domain.Progress == ProgressManual, stopped: make(chan struct{})}
	if d.info.Domain.Threading == ThreadUnspec {
		d.info.Domain.Threading = ThreadSafe
	}
	if d.info.Domain.Progress == ProgressUnspec {
		d.info.Domain.Progress = ProgressAuto
	}
	d.info.Domain.Queues = dev.Workers()
	// MRShared as the device opened is, whatever GetInfo saw (a daemon
	// may have started or stopped since).
	d.info.Domain.MRMode &^= MRShared
	if dev.Attached() {
		d.info.Domain.MRMode |= MRShared
	}
	dev.SetOverruns(d.overruns.Load)
	for i := 0; i < dev.Workers(); i++ {
		w := &worker{d: d, id: i}
		w.eps.Store(&[]servicer{})
		d.workers = append(d.workers, w)
		dev.SetWaiting(i, w.waiting)
	}
	if !d.manual {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		hooks := make([]func() (bool, error), len(d.workers))
		for i, w := range d.workers {
			hooks[i] = w.pass
		}
		go func() {
			d.runErr = dev.RunWorkers(ctx, hooks)
			if d.runErr != nil && ctx.Err() == nil {
				for _, w := range d.workers {
					w.deviceGone(d.runErr)
				}
			}
			close(d.stopped)
		}()
	}
	f.remember(d)
	// The connection manager runs from the start, as the kernel's does:
	// a connection request for a service nobody here listens on gets its
	// rejection (Invalid Service ID) at once, not silence until the
	// requester gives up. When it cannot start (QP1 taken on a borrowed
	// device), the first endpoint that needs it says why.
	_, _ = d.cm()
	return d, nil
}

// Info is the domain's offer, with the queues it serves.
func (d *Domain) Info() Info { return d.info }

// Name is the device's name.
func (d *Domain) Name() string { return d.info.Domain.Name }

// Progress drives the transport once on the calling goroutine, with
// manual progress (reading a CQ does it too). It reports whether anything
// happened. With automatic progress it does nothing.
func (d *Domain) Progress() bool {
	if !d.manual {
		return false
	}
	did := false
	for _, w := range d.workers {
		if w.progress() {
			did = true
		}
	}
	return did
}

// progress drives the worker once, unless another goroutine is at it.
func (w *worker) progress() bool {
	if !w.progMu.TryLock() {
		return false
	}
	defer w.progMu.Unlock()
	// What the caller posted goes out in this pass, not the next: into
	// the queue pairs first, then the engine transmits it, then what
	// completed is reaped.
	for _, ep := range *w.eps.Load() {
		ep.submit()
	}
	ok1, err := w.d.dev.ProgressWorker(w.id)
	if err != nil {
		w.deviceGone(err)
		return true
	}
	ok2, _ := w.pass()
	return ok1 || ok2
}

// deviceGone records that the device failed under the domain, seen by
// worker w where its queue pairs may be touched (automatic progress
// stopped, or manual progress holds it): its queue pairs move to error,
// and one last pass over its endpoints reaps the flushed work into the
// CQs with error statuses; reads that would wait, and control work,
// return ErrDeviceGone from then on.
func (w *worker) deviceGone(cause error) {
	w.goneOnce.Do(func() {
		err := fmt.Errorf("%w: %w", ErrDeviceGone, cause)
		w.d.dev.FailQPs(w.id)
		for _, ep := range *w.eps.Load() {
			ep.service()
		}
		w.d.gone.CompareAndSwap(nil, &err)
		// A reader that took the flushed completions and parked before
		// gone was set would wait for a completion that never comes:
		// wake it to see the device gone.
		for _, ep := range *w.eps.Load() {
			if e, ok := ep.(*Endpoint); ok {
				for _, q := range []*CQ{e.txCQ, e.rxCQ} {
					if q != nil {
						q.signal()
					}
				}
			}
		}
		w.failCtl(err)
	})
}

// goneErr is ErrDeviceGone (wrapped) once the device failed, else nil.
func (d *Domain) goneErr() error {
	if e := d.gone.Load(); e != nil {
		return *e
	}
	return nil
}

// failCtl answers the control work queued for a worker that no longer
// runs.
func (w *worker) failCtl(err error) {
	for _, r := range w.takeCtl() {
		r.done <- err
	}
}

// takeCtl takes the control work queued for the worker.
func (w *worker) takeCtl() []ctlReq {
	w.ctlMu.Lock()
	defer w.ctlMu.Unlock()
	reqs := w.ctl
	w.ctl = nil
	w.ctlPending.Store(false)
	return reqs
}

// idle reports a worker no endpoint uses: manual progress drives it on
// behalf of the others (frames for their queue pairs may arrive on its
// queue).
func (w *worker) idle() bool { return len(*w.eps.Load()) == 0 }

// Queues is how many queues, and workers, the domain serves. Endpoints
// (and shared receive contexts) are spread over the workers round-robin in
// the order they are opened: the i-th is on worker i % Queues.
func (d *Domain) Queues() int { return len(d.workers) }

// PinThread locks the calling goroutine to its OS thread and binds it to
// the CPU of worker w (DomainAttr.CPUs), for an application that drives
// worker w with manual progress. Without CPUs it does nothing.
func (d *Domain) PinThread(w int) error { return d.dev.PinThread(w) }

// Close stops the workers and closes the device. It fails with ErrBusy
// while endpoints, CQs, counters, AVs or memory regions are open.
func (d *Domain) Close() error {
	first, err := d.refs.closing()
	if !first {
		return err
	}
	d.fab.forget(d)
	d.closeCM()
	if d.cancel != nil {
		d.cancel()
		<-d.stopped
	}
	d.fab.refs.done()
	return d.closeDevice()
}

// sameDomainAttr reports whether a domain opened with attributes a serves
// one asked for with b: progress and threading as they default, the
// queues and CPUs where b names them.
func sameDomainAttr(a, b DomainAttr) bool {
	norm := func(x DomainAttr) DomainAttr {
		if x.Progress == ProgressUnspec {
			x.Progress = ProgressAuto
		}
		if x.Threading == ThreadUnspec {
			x.Threading = ThreadSafe
		}
		return x
	}
	a, b = norm(a), norm(b)
	return a.Progress == b.Progress && a.Threading == b.Threading &&
		(b.Queues == 0 || b.Queues == a.Queues) && (len(b.CPUs) == 0 || slices.Equal(a.CPUs, b.CPUs))
}

// exec runs f where worker w's queue pairs may be touched: on w's
// goroutine with automatic progress, under the progress lock with manual.
func (d *Domain) exec(w *worker, f func() error) error {
	if err := d.goneErr(); err != nil {
		return err
	}
	if d.manual {
		w.progMu.Lock()
		defer w.progMu.Unlock()
		return f()
	}
	r := ctlReq{f: f, done: make(chan error, 1)}
	w.ctlMu.Lock()
	w.ctl = append(w.ctl, r)
	w.ctlPending.Store(true)
	w.ctlMu.Unlock()
	d.dev.Wake(w.id)
	select {
	case err := <-r.done:
		return err
	case <-d.stopped:
		if d.runErr != nil && !errors.Is(d.runErr, context.Canceled) {
			return fmt.Errorf("%w: the device stopped: %w", ErrClosed, d.runErr)
		}
		return ErrClosed
	}
}

// pickWorker spreads endpoints over the workers.
func (d *Domain) pickWorker() *worker {
	return d.workers[int(d.next.Add(1)-1)%len(d.workers)]
}

// addEP and removeEP change a worker's endpoint list; removeEP runs on the
// worker (exec), so the worker never serves an endpoint being torn down.
// servicer is what a worker serves between engine passes: an endpoint,
// or a shared receive context.
type servicer interface {
	service() bool
	// submit hands what was posted to the queue pairs, and no more.
	submit() bool
	posted() bool
}

func (w *worker) addEP(ep servicer) {
	w.d.epMu.Lock()
	defer w.d.epMu.Unlock()
	old := *w.eps.Load()
	eps := append(append(make([]servicer, 0, len(old)+1), old...), ep)
	w.eps.Store(&eps)
}

func (w *worker) removeEP(ep servicer) {
	w.d.epMu.Lock()
	defer w.d.epMu.Unlock()
	old := *w.eps.Load()
	eps := make([]servicer, 0, len(old))
	for _, e := range old {
		if e != ep {
			eps = append(eps, e)
		}
	}
	w.eps.Store(&eps)
}

// pass is the worker's hook between engine passes: control work, then
// each endpoint's posts and completions.
func (w *worker) pass() (bool, error) {
	did := false
	if w.ctlPending.Load() {
		for _, r := range w.takeCtl() {
			r.done <- r.f()
		}
		did = true
	}
	for _, ep := range *w.eps.Load() {
		if ep.service() {
			did = true
		}
	}
	return did, nil
}

// waiting reports work posted to the worker by other goroutines: the
// worker does not sleep while there is some.
func (w *worker) waiting() bool {
	if w.ctlPending.Load() {
		return true
	}
	for _, ep := range *w.eps.Load() {
		if ep.posted() {
			return true
		}
	}
	return false
}

// kick wakes the worker after something was posted to it (with manual
// progress, a goroutine may be asleep in it, see CQ.ReadContext). It
// costs an atomic load when the worker is awake.
func (w *worker) kick() { w.d.dev.Wake(w.id) }
