// Package device is a softfabric device as an application sees it: its
// links (the AF_XDP sockets of an interface brought up with `softfabric
// up`, one per receive queue, or in-memory links in tests), a worker per
// link that runs the queue pairs it owns (an engine.Group), the memory
// regions, and the address facts (MAC, GIDs, next hops) needed to connect
// queue pairs to peers.
//
// Each queue pair belongs to one worker (QPConfig.Worker), which transmits
// its frames on the worker's queue and receives them from it; frames that
// arrive on another queue reach it through the group's handoff rings. The
// workers make progress in one of three ways:
//
//   - Progress (manual progress, as libfabric's FI_PROGRESS_MANUAL) and Run
//     drive every worker on the calling goroutine: the simple way for a
//     single-threaded application, which may then use any queue pair.
//   - ProgressWorker drives one worker on the calling goroutine, and
//     RunWorkers each worker on a goroutine of its own (pinned to a CPU
//     when Options.CPUs says so), with the application's hook for that
//     worker between its passes: the way to use every core. A queue pair
//     (and its completion queues) is then used only from the goroutine of
//     the worker that owns it.
//
// Queue pairs are created and destroyed while no worker runs, or from the
// hook of the worker that owns them.
package device

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Registrar tells the receive classifier which queue pair numbers belong to
// this device's contexts. Nil in tests over in-memory links.
type Registrar interface {
	SetQP(qpn, ctx uint32) error
	DeleteQP(qpn uint32) error
}

// ConnRegistrar is a Registrar that also learns the RC peer each queue
// pair is connected to: the daemon lets an attached application send RC
// packets only to its own queue pairs' peers.
type ConnRegistrar interface {
	Connected(qpn uint32, peer netip.Addr, destQPN uint32) error
}

// ServiceRegistrar is a Registrar that shares queue pair 1 among
// applications: the daemon routes RDMA-CM connection requests by service
// ID and the other CM messages by communication ID, whose top 16 bits
// name the application (CommIDPrefix).
type ServiceRegistrar interface {
	Listen(service uint64) error
	Unlisten(service uint64) error
	CommIDPrefix() uint32
}

// CommIDPrefix is what the top 16 bits of this device's RDMA-CM
// communication IDs must be, and true, when it shares QP1 with other
// applications through a daemon; any IDs will do otherwise.
func (d *Device) CommIDPrefix() (uint32, bool) {
	if s, ok := d.opts.Registrar.(ServiceRegistrar); ok {
		return s.CommIDPrefix(), true
	}
	return 0, false
}

// Listen routes the RDMA-CM connection requests for service to this
// device (a daemon's application); in process it has nothing to do.
func (d *Device) Listen(service uint64) error {
	if s, ok := d.opts.Registrar.(ServiceRegistrar); ok {
		return s.Listen(service)
	}
	return nil
}

// Unlisten undoes Listen.
func (d *Device) Unlisten(service uint64) error {
	if s, ok := d.opts.Registrar.(ServiceRegistrar); ok {
		return s.Unlisten(service)
	}
	return nil
}

// Resolver finds the source address and next-hop MAC for a destination.
type Resolver func(ctx context.Context, dst netip.Addr) (src netip.Addr, mac [6]byte, err error)

// Options describe a device over a given link.
type Options struct {
	Name string
	MAC  [6]byte
	// GIDs are the device's RoCEv2 GIDs (IPv4-mapped or IPv6).
	GIDs []netip.Addr
	// MTU is the link MTU; the largest path MTU is derived from it.
	MTU       int
	Resolve   Resolver
	Registrar Registrar
	// MaxRegions sizes the memory region table (default 4096).
	MaxRegions int
	// Pace is how the workers back off when idle (engine.Backoff; zero:
	// its defaults).
	Pace engine.Backoff
	// QPNWorker, if set, names the worker whose link receives the frames
	// of a queue pair number (an HFI link sends QPN q to its peer's
	// context q % n): a new queue pair gets a random number that maps to
	// the worker owning it, so that its frames need no hand-off. Numbers
	// asked for (QPConfig.QPN) are taken as they are.
	QPNWorker func(qpn uint32) int
	// Loopback says that frames to the device's own MAC and addresses
	// come back to it (a daemon switches them between its applications;
	// in process, each worker's link loops them back): queue pairs of the
	// device may connect to each other. Without it, Path asks Resolve for
	// those addresses too (the kernel's resolver refuses them with
	// ErrNoLoopback).
	Loopback bool
	// CPUs, if not empty, pins worker i of RunWorkers to CPUs[i %
	// len(CPUs)]. By default workers are not pinned: on a host shared
	// with other busy-polling processes (and with the kernel's own
	// softirq work for the same queues) the scheduler places them better
	// than a fixed guess.
	CPUs []int
}

// ErrNoLoopback is matched by Path's error for a destination that is an
// address of this host but not one of the device's (another interface's,
// or lo's): the kernel routes it through lo, and frames sent to it on the
// device's NIC would never come back. The device's own addresses are
// reached through its loopback (Options.Loopback).
var ErrNoLoopback = errors.New("the destination is an address of this host but not of this device")

// Device is an open softfabric device.
type Device struct {
	opts     Options
	links    []link.Link
	group    *engine.Group
	mrs      *mr.Table
	epoch    time.Time
	qpMu     sync.Mutex // guards qps: workers create queue pairs concurrently
	qps      map[uint32]engine.QP
	closers  []func() error
	sleepers []*sleeper
	tallies  []tally // by worker
	overruns atomic.Pointer[func() uint64]
	gone     <-chan struct{} // closed when the daemon went away (Attach)
	closed   atomic.Bool
}

// Gone is closed when the device went away under its user: the daemon it
// was attached to stopped (not when this process closes the device). A
// device opened in process never goes away on its own: nil, which never
// closes.
func (d *Device) Gone() <-chan struct{} { return d.gone }

// New returns a device over l, with one worker.
func New(l link.Link, o Options) *Device { return NewWorkers([]link.Link{l}, o) }

// NewWorkers returns a device with a worker on each of links (one per
// receive queue of an interface).
func NewWorkers(links []link.Link, o Options) *Device {
	if o.MaxRegions == 0 {
		o.MaxRegions = 4096
	}
	d := &Device{opts: o, links: links, group: engine.NewGroup(links, 0), mrs: mr.NewTable(o.MaxRegions), epoch: time.Now(), qps: map[uint32]engine.QP{},
		tallies: make([]tally, len(links))}
	d.group.SetPace(o.Pace)
	d.setSleepers()
	return d
}

// Name is the interface name.
func (d *Device) Name() string { return d.opts.Name }

// MAC is the device's Ethernet address.
func (d *Device) MAC() [6]byte { return d.opts.MAC }

// GIDs are the device's RoCEv2 GIDs.
func (d *Device) GIDs() []netip.Addr { return d.opts.GIDs }

// MRs is the device's memory region table.
func (d *Device) MRs() *mr.Table { return d.mrs }

// Workers is the number of workers (one per queue served).
func (d *Device) Workers() int { return d.group.Len() }

// WorkerOf returns the worker that owns QPN qpn, or -1.
func (d *Device) WorkerOf(qpn uint32) int { return d.group.Owner(qpn) }

// WorkerStats returns the counters of each worker's engine. Read them
// while no worker runs (they are the workers' own, unsynchronised).
func (d *Device) WorkerStats() []engine.Stats {
	out := make([]engine.Stats, d.group.Len())
	for i := range out {
		out[i] = d.group.Node(i).Stats()
	}
	return out
}

// WorkerStat returns worker w's counters; read them on its goroutine.
func (d *Device) WorkerStat(w int) engine.Stats { return d.group.Node(w).Stats() }

// Stats is the sum of WorkerStats.
func (d *Device) Stats() engine.Stats {
	var t engine.Stats
	for _, s := range d.WorkerStats() {
		t.RxFrames += s.RxFrames
		t.TxFrames += s.TxFrames
		t.Malformed += s.Malformed
		t.BadICRC += s.BadICRC
		t.UnknownQP += s.UnknownQP
		t.TxStalls += s.TxStalls
		t.HandedOff += s.HandedOff
		t.HandedIn += s.HandedIn
		t.HandoffDrops += s.HandoffDrops
	}
	return t
}

// MTU is the link MTU.
func (d *Device) MTU() int { return d.opts.MTU }

// ActiveMTU is the largest IBTA path MTU that fits the link MTU with the
// RoCEv2 headers (IPv4 or IPv6, UDP, BTH and its extensions, ICRC).
func (d *Device) ActiveMTU() int { return ActiveMTU(d.opts.MTU) }

// ActiveMTU is the largest IBTA path MTU that fits a link MTU of linkMTU.
func ActiveMTU(linkMTU int) int {
	const overhead = wire.IPv6Size + wire.UDPSize + wire.BTHSize + wire.AtomicETHSize + wire.ICRCSize
	for _, m := range []int{4096, 2048, 1024, 512, 256} {
		if m+overhead <= linkMTU {
			return m
		}
	}
	return 256
}

// Now is the engine clock: nanoseconds since the device was opened.
func (d *Device) Now() int64 { return int64(time.Since(d.epoch)) }

// Progress runs one engine pass of every worker on the calling goroutine:
// receive, execute, transmit. It reports whether anything happened.
func (d *Device) Progress() (bool, error) { return d.group.Poll(d.Now()) }

// SetWaiting tells worker w where to look, before it sleeps, for work
// that other goroutines publish to it outside its queue pairs (see
// engine.Node.SetWaiting); they call Wake after publishing.
func (d *Device) SetWaiting(w int, f func() bool) { d.group.Node(w).SetWaiting(f) }

// SleepWorker blocks the calling goroutine (and its thread) until frames
// reach worker w, another worker hands it some, it is woken (Wake), its
// next timer is due or timeout passes: the idle wait of an application
// that drives the worker itself (manual progress).
func (d *Device) SleepWorker(w int, timeout time.Duration) { d.group.Node(w).Sleep(d.Now(), timeout) }

// Wake wakes worker w if it sleeps.
func (d *Device) Wake(w int) { d.group.Node(w).Wake() }

// ProgressWorker runs one pass of worker w on the calling goroutine.
func (d *Device) ProgressWorker(w int) (bool, error) {
	now := d.Now()
	d.tallyWorker(w, now)
	return d.group.Node(w).Poll(now)
}

// Run drives every worker on the calling goroutine until ctx ends or hook
// fails: the engine on a locked thread (pinned to the first of
// Options.CPUs, if any), hook (the application's posting and reaping)
// between passes, busy-polling while there is work and backing off to a
// blocking wait when there is none.
func (d *Device) Run(ctx context.Context, hook func() (bool, error)) error {
	var pin func() error
	if len(d.opts.CPUs) > 0 {
		pin = func() error { return PinCPU(d.opts.CPUs[0]) }
	}
	return d.group.Run(ctx, d.Now, hook, pin)
}

// PinThread locks the calling goroutine to its OS thread for good and
// binds the thread to the CPU of worker w (Options.CPUs), for an
// application that drives workers from its own goroutine (Progress,
// ProgressWorker). Without Options.CPUs it does nothing. The goroutine
// should end when its work is done: its thread is not given back to the
// Go scheduler, whose other goroutines must not inherit the affinity.
func (d *Device) PinThread(w int) error {
	if len(d.opts.CPUs) == 0 {
		return nil
	}
	runtime.LockOSThread()
	return PinCPU(d.opts.CPUs[w%len(d.opts.CPUs)])
}

// RunWorkers drives each worker on a goroutine of its own until ctx ends
// or a hook fails, then stops them all and returns the first error.
// hooks[w] (nil: none; an empty slice: no hooks) runs between worker w's
// passes, on its goroutine.
func (d *Device) RunWorkers(ctx context.Context, hooks []func() (bool, error)) error {
	var pin func(int) error
	if len(d.opts.CPUs) > 0 {
		pin = func(w int) error { return PinCPU(d.opts.CPUs[w%len(d.opts.CPUs)]) }
	}
	// Each worker publishes its queue pairs' counters between passes.
	wrapped := make([]func() (bool, error), d.group.Len())
	for w := range wrapped {
		var h func() (bool, error)
		if w < len(hooks) {
			h = hooks[w]
		}
		wrapped[w] = func() (bool, error) {
			d.tallyWorker(w, d.Now())
			if h == nil {
				return false, nil
			}
			return h()
		}
	}
	return d.group.RunEach(ctx, d.Now, wrapped, pin)
}

// OnClose adds f to what Close releases (after the queue pairs, in
// reverse order of adding).
func (d *Device) OnClose(f func() error) { d.closers = append(d.closers, f) }

// Close destroys the queue pairs and releases what Open took. Closing
// again does nothing.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.qpMu.Lock()
	qps := make(map[uint32]engine.QP, len(d.qps))
	for n, q := range d.qps {
		qps[n] = q
	}
	d.qpMu.Unlock()
	for n, q := range qps {
		if q == nil {
			d.ReleaseQPN(n)
		} else {
			d.Destroy(q)
		}
	}
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	for _, s := range d.sleepers {
		errs = append(errs, s.close())
	}
	d.sleepers = nil
	return errors.Join(errs...)
}

// allocQPN picks an unused queue pair number: random, so that a restarted
// process does not reuse its predecessor's numbers while old packets are
// still in flight; one that Options.QPNWorker maps to worker, unless
// worker is negative.
// The number is taken (reserved in qps) until attach or release.
func (d *Device) allocQPN(want uint32, worker int) (uint32, error) {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if want != 0 {
		if want < engine.GSIQPN || want >= engine.MaxQPN {
			return 0, fmt.Errorf("device: QPN %d: %w", want, ErrQPNRange)
		}
		if _, used := d.qps[want]; used {
			return 0, fmt.Errorf("device: QPN %d: %w", want, ErrQPNInUse)
		}
		d.qps[want] = nil
		return want, nil
	}
	steer := worker >= 0 && worker < d.group.Len() && d.opts.QPNWorker != nil
	for try := 0; ; try++ {
		n := 2 + rand.Uint32N(engine.MaxQPN-2)
		if steer && try < 1<<12 && d.opts.QPNWorker(n) != worker {
			continue // after that many, a QPNWorker that never names worker is ignored
		}
		if _, used := d.qps[n]; !used {
			d.qps[n] = nil
			return n, nil
		}
	}
}

// Errors of a requested queue pair number (QPConfig.QPN).
var (
	ErrQPNInUse = errors.New("queue pair number in use")
	ErrQPNRange = errors.New("queue pair number out of range")
)

func (d *Device) forgetQPN(n uint32) {
	d.qpMu.Lock()
	delete(d.qps, n)
	d.qpMu.Unlock()
}

func (d *Device) attach(q engine.QP, worker int) error {
	if worker < 0 || worker >= d.group.Len() {
		return fmt.Errorf("device: worker %d: the device has %d", worker, d.group.Len())
	}
	if d.opts.Registrar != nil {
		if err := d.opts.Registrar.SetQP(q.QPN(), 0); err != nil {
			return fmt.Errorf("registering QPN %d with the classifier: %w", q.QPN(), err)
		}
	}
	if err := d.group.Attach(worker, q); err != nil {
		if d.opts.Registrar != nil {
			_ = d.opts.Registrar.DeleteQP(q.QPN())
		}
		return err
	}
	d.qpMu.Lock()
	d.qps[q.QPN()] = q
	d.qpMu.Unlock()
	return nil
}

// Destroy removes a queue pair from the device. Call it while no worker
// runs or from the hook of the worker that owns q.
func (d *Device) Destroy(q engine.QP) {
	d.qpMu.Lock()
	if cur, ok := d.qps[q.QPN()]; !ok || cur != q {
		d.qpMu.Unlock()
		return
	}
	delete(d.qps, q.QPN())
	d.qpMu.Unlock()
	d.retire(d.group.Owner(q.QPN()), q)
	d.group.Detach(q)
	if d.opts.Registrar != nil {
		_ = d.opts.Registrar.DeleteQP(q.QPN())
	}
}

// QPConfig describes a new queue pair.
type QPConfig struct {
	SendCQ, RecvCQ *verbs.CQ
	RQ             *verbs.RecvQueue
	SQDepth        int
	// Worker is the worker that owns the queue pair (default 0): it
	// transmits on that worker's queue and is driven by its goroutine.
	Worker int
	// QPN asks for this queue pair number (0: a random free one), for an
	// endpoint at a well-known number.
	QPN uint32
}

// NewRC creates a reliable connected queue pair in the INIT state.
func (d *Device) NewRC(c QPConfig, access mr.Access) (*rc.QP, error) {
	return withQPN(d, c.QPN, c.Worker, func(qpn uint32) (*rc.QP, error) { return d.newRC(qpn, c, access) })
}

// maxQPNTries bounds the random numbers tried for a queue pair: a
// daemon's other applications hold numbers this process does not know.
const maxQPNTries = 16

// withQPN runs create with a number allocated for it (want, or a random
// free one), releasing the number when create fails, and trying another
// random one when the daemon says another application has it.
func withQPN[Q any](d *Device, want uint32, worker int, create func(uint32) (Q, error)) (Q, error) {
	for try := 0; ; try++ {
		qpn, err := d.allocQPN(want, worker)
		if err != nil {
			var zero Q
			return zero, err
		}
		q, err := create(qpn)
		if err == nil {
			return q, nil
		}
		d.forgetQPN(qpn)
		if want != 0 || try == maxQPNTries-1 || !errors.Is(err, ErrQPNInUse) {
			return q, err
		}
	}
}

func (d *Device) newRC(qpn uint32, c QPConfig, access mr.Access) (*rc.QP, error) {
	q, err := rc.New(rc.Config{QPN: qpn, MRs: d.mrs, SendCQ: c.SendCQ, RecvCQ: c.RecvCQ, RQ: c.RQ, SQDepth: c.SQDepth})
	if err == nil {
		a := verbs.QPAttr{State: verbs.StateInit, Access: access, PKey: wire.DefaultPKey}
		err = q.Modify(&a, verbs.AttrState|verbs.AttrAccess|verbs.AttrPKey)
	}
	if err == nil {
		err = d.attach(q, c.Worker)
	}
	if err != nil {
		return nil, err
	}
	return q, nil
}

// NewUD creates an unreliable datagram queue pair in RTS.
func (d *Device) NewUD(c QPConfig, qkey uint32) (*ud.QP, error) {
	return withQPN(d, c.QPN, c.Worker, func(qpn uint32) (*ud.QP, error) { return d.newUD(qpn, c, qkey) })
}

func (d *Device) newUD(qpn uint32, c QPConfig, qkey uint32) (*ud.QP, error) {
	q, err := ud.New(ud.Config{QPN: qpn, MRs: d.mrs, SendCQ: c.SendCQ, RecvCQ: c.RecvCQ, RQ: c.RQ, SQDepth: c.SQDepth})
	if err != nil {
		return nil, err
	}
	for _, s := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.StateInit, QKey: qkey, PKey: wire.DefaultPKey}, verbs.AttrState | verbs.AttrQKey | verbs.AttrPKey},
		{verbs.QPAttr{State: verbs.StateRTR, PathMTU: d.ActiveMTU()}, verbs.AttrState | verbs.AttrPathMTU},
		{verbs.QPAttr{State: verbs.StateRTS, SQPSN: rand.Uint32() & psn.Mask}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := q.Modify(&s.a, s.m); err != nil {
			return nil, err
		}
	}
	if err := d.attach(q, c.Worker); err != nil {
		return nil, err
	}
	return q, nil
}

// Remote is what a peer tells about its queue pair out of band.
type Remote struct {
	QPN uint32
	PSN uint32
	GID netip.Addr
}

// ConnectOptions tune the RC connection; zero values take the defaults.
type ConnectOptions struct {
	PathMTU     int   // default: ActiveMTU
	Timeout     uint8 // default 14 (67 ms)
	RetryCnt    uint8 // default 7
	RNRRetry    uint8 // default 7 (forever)
	MinRNRTimer uint8 // default 12 (0.64 ms)
	RdAtomic    uint8 // default 16
	// FlowLabel is the path's flow label, from which the UDP source port
	// of the queue pair's packets derives (as rdma_cm's connections set
	// it); 0: the QPN pair's, as Linux uses when none is set.
	FlowLabel uint32
}

// Path builds the L2–L4 header fields for frames from local QP qpn to a
// peer: source address and next-hop MAC from the kernel's routes and
// neighbours.
func (d *Device) Path(ctx context.Context, dst netip.Addr, qpn, destQPN uint32) (wire.PathFields, error) {
	dst = dst.Unmap()
	if d.opts.Resolve == nil {
		return wire.PathFields{}, errors.New("device: no resolver")
	}
	if _, own := d.GID(dst); own && d.opts.Loopback {
		// A queue pair of this device: the frames never leave it.
		return wire.PathFields{SrcMAC: d.opts.MAC, DstMAC: d.opts.MAC, Src: dst.WithZone(""), Dst: dst, SrcPort: wire.SourcePort(qpn, destQPN)}, nil
	}
	src, mac, err := d.opts.Resolve(ctx, dst)
	if err != nil {
		return wire.PathFields{}, err
	}
	return wire.PathFields{SrcMAC: d.opts.MAC, DstMAC: mac, Src: src, Dst: dst, SrcPort: wire.SourcePort(qpn, destQPN)}, nil
}

// ConnectRC moves an RC queue pair from INIT to RTS, connected to r.
// localPSN is the first PSN it sends.
func (d *Device) ConnectRC(ctx context.Context, q *rc.QP, localPSN uint32, r Remote, o ConnectOptions) error {
	if o.PathMTU == 0 {
		o.PathMTU = d.ActiveMTU()
	}
	if o.Timeout == 0 {
		o.Timeout = 14
	}
	if o.RetryCnt == 0 {
		o.RetryCnt = 7
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = 7
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 12
	}
	if o.RdAtomic == 0 {
		o.RdAtomic = 16
	}
	path, err := d.Path(ctx, r.GID, q.QPN(), r.QPN)
	if err != nil {
		return err
	}
	if o.FlowLabel != 0 {
		path.SrcPort = wire.FlowLabelSourcePort(o.FlowLabel)
	}
	if cr, ok := d.opts.Registrar.(ConnRegistrar); ok {
		if err := cr.Connected(q.QPN(), path.Dst, r.QPN); err != nil {
			return fmt.Errorf("registering the connection of QPN %d: %w", q.QPN(), err)
		}
	}
	return q.Connect(rc.ConnectAttr{Path: path, PathMTU: o.PathMTU, DestQPN: r.QPN, RQPSN: r.PSN, SQPSN: localPSN,
		Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MinRNRTimer: o.MinRNRTimer, RdAtomic: o.RdAtomic})
}

// AddressHandle resolves a UD destination.
func (d *Device) AddressHandle(ctx context.Context, gid netip.Addr, srcQPN, destQPN, qkey uint32) (*verbs.AddressHandle, error) {
	path, err := d.Path(ctx, gid, srcQPN, destQPN)
	if err != nil {
		return nil, err
	}
	return verbs.NewAddressHandle(path, destQPN, qkey)
}

// GID returns the device GID that carries address a (IPv4 or IPv6; a
// zone, as in fe80::1%eth0, is ignored), or the first IPv4 one when a is
// invalid.
func (d *Device) GID(a netip.Addr) (netip.Addr, bool) {
	for _, g := range d.opts.GIDs {
		if a.IsValid() && g.Unmap() == a.Unmap().WithZone("") || !a.IsValid() && g.Is4In6() {
			return g, true
		}
	}
	return netip.Addr{}, false
}

// Link is worker 0's link, for raw frame baselines that bypass the
// transport: its AF_XDP socket itself in process, without the loopback.
func (d *Device) Link() link.Link { return unloop(d.links[0]) }

// unloop is the socket under a worker's loopback, or l.
func unloop(l link.Link) link.Link {
	if ll, ok := l.(*loopLink); ok {
		return ll.socketLink
	}
	return l
}

// Links are the workers' links, by worker, as Link gives worker 0's.
func (d *Device) Links() []link.Link {
	out := make([]link.Link, len(d.links))
	for i, l := range d.links {
		out[i] = unloop(l)
	}
	return out
}

// ReserveQPN takes a queue pair number and steers frames addressed to it
// to this device, without a queue pair behind it: raw-frame tools use it
// as a sink. Release with ReleaseQPN.
func (d *Device) ReserveQPN() (uint32, error) {
	return withQPN(d, 0, -1, func(n uint32) (uint32, error) {
		if d.opts.Registrar != nil {
			if err := d.opts.Registrar.SetQP(n, 0); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
}

// ReleaseQPN gives back a number taken by ReserveQPN.
func (d *Device) ReleaseQPN(n uint32) {
	d.qpMu.Lock()
	q, ok := d.qps[n]
	if ok && q == nil {
		delete(d.qps, n)
	}
	d.qpMu.Unlock()
	if ok && q == nil {
		if d.opts.Registrar != nil {
			_ = d.opts.Registrar.DeleteQP(n)
		}
	}
}

// FailQPs moves the queue pairs of worker w to the error state, which
// flushes their outstanding work requests with error completions: what is
// left to do when the device is gone (ErrGone). Call it where w's queue
// pairs may be touched (w stopped, or under its manual progress).
func (d *Device) FailQPs(w int) {
	d.qpMu.Lock()
	qps := make([]engine.QP, 0, len(d.qps))
	for n, q := range d.qps {
		if q != nil && d.group.Owner(n) == w {
			qps = append(qps, q)
		}
	}
	d.qpMu.Unlock()
	for _, q := range qps {
		if m, ok := q.(interface {
			Modify(*verbs.QPAttr, verbs.AttrMask) error
		}); ok {
			_ = m.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
	}
}
