package device

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/shmlink"
)

// ErrGone is the error of a device whose daemon stopped: its links fail
// with it, and so do the workers and every call that needs the daemon.
var ErrGone = errors.New("softfabric device gone (its daemon stopped)")

// ErrNoDaemon is Attach's error when no daemon serves the interface.
var ErrNoDaemon = errors.New("no softfabric daemon serves this interface")

// Served reports whether a daemon serves iface (its control socket is
// there; Attach tells whether it answers).
func Served(iface string) bool {
	dir, err := runDirOf(iface)
	if err != nil {
		return false
	}
	_, err = os.Stat(daemonapi.SocketPath(dir))
	return err == nil
}

// runDirOf is iface's run directory in this network namespace.
func runDirOf(iface string) (string, error) {
	ns, err := ctrl.NetNSID()
	if err != nil {
		return "", err
	}
	return ctrl.RunDir(ns, iface), nil
}

// OpenAny attaches to the daemon that serves iface, or opens the device
// in this process when none does (`softfabric up --no-daemon`). A name
// that a registered opener claims (hfi1_N: hfidev/hfidevice) is opened by
// it instead.
func OpenAny(iface string, o OpenOptions) (*Device, error) {
	if open := claimed(iface); open != nil {
		return open(iface, o)
	}
	if Served(iface) {
		return Attach(iface, o)
	}
	return Open(iface, o)
}

// Attach attaches to the daemon that serves iface (ctrl/daemon): the
// device's frames pass through shared-memory rings to and from the
// daemon, which owns the NIC; this process runs the transport for its
// own queue pairs, with a worker per daemon queue, as Open's device does.
// Queue pair numbers are registered with the daemon, which refuses those
// of another application. When the daemon stops, the device fails with
// ErrGone.
func Attach(iface string, o OpenOptions) (*Device, error) {
	runDir, err := runDirOf(iface)
	if err != nil {
		return nil, err
	}
	c, err := daemonapi.Dial(runDir)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrNoDaemon, iface, err)
	}
	cl := &client{c: c, replies: make(chan reply, 1), gone: make(chan struct{}), lost: make(chan struct{})}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	rep, fds, err := daemonapi.Call(c, daemonapi.Request{Op: daemonapi.OpAttach, Version: daemonapi.Version, Name: filepath.Base(os.Args[0])})
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("attaching to the daemon of %s: %w", iface, err)
	}
	ai := rep.Attach
	if ai == nil || ai.Queues < 1 || len(fds) != 3*ai.Queues {
		closeFDs(fds)
		c.Close()
		return nil, fmt.Errorf("attaching to the daemon of %s: %w: %d descriptors for %v", iface, daemonapi.ErrInvalid, len(fds), ai)
	}
	cl.app = ai.App
	for i := 0; i < ai.Queues; i++ {
		r, err := shmlink.Map([3]int{fds[3*i], fds[3*i+1], fds[3*i+2]})
		if err != nil {
			closeFDs(fds[3*i+3:])
			cl.closeRegions()
			c.Close()
			return nil, fmt.Errorf("attaching to the daemon of %s: queue %d: %w", iface, i, err)
		}
		cl.regions = append(cl.regions, r)
	}
	// A worker per daemon queue, whatever o.Queues says: the daemon
	// delivers a queue pair's frames on the queue the NIC picked, and a
	// ring nobody reads would lose them.
	links := make([]link.Link, ai.Queues)
	for i := range links {
		links[i] = cl.regions[i].AppEnd()
	}
	// The debugging aids (SOFTFABRIC_DEBUG_PCAP, _LINK_FAULTS) apply to
	// what this application sends and receives, as in process.
	var debugClosers []func() error
	if links, err = debugLinks(links, iface, &debugClosers); err != nil {
		cl.closeRegions()
		c.Close()
		return nil, err
	}
	d := NewWorkers(links, Options{Name: ai.Iface, MAC: ai.MAC, GIDs: ai.GIDs, MTU: ai.MTU, Resolve: resolve, Registrar: cl, CPUs: o.CPUs, Loopback: true,
		Pace: attachedPace()})
	d.closers = append(d.closers, cl.close)
	d.closers = append(d.closers, debugClosers...)
	d.gone = cl.lost
	go cl.read()
	go cl.report(d)
	return d, nil
}

// reportEvery is how often an attached device reports its transport
// counters to the daemon.
const reportEvery = time.Second

// report sends the device's transport counters to the daemon every
// second, until the device closes or the daemon is gone.
func (cl *client) report(d *Device) {
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	for {
		select {
		case <-cl.gone:
			return
		case <-t.C:
		}
		st := d.TransportStats()
		if err := cl.call(daemonapi.Request{Op: daemonapi.OpReport, Transport: &st}); err != nil {
			return
		}
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = os.NewFile(uintptr(fd), "").Close()
	}
}

// client is an attached device's control connection: the Registrar that
// registers QPNs and connections with the daemon.
type client struct {
	c       *net.UnixConn
	regions []*shmlink.Region
	app     uint32     // the daemon's number for this application
	mu      sync.Mutex // one call at a time
	replies chan reply
	gone    chan struct{}
	err     error // why gone
	once    sync.Once
	// lost is closed when the daemon went away, not this process closing
	// the device (Device.Gone).
	lost    chan struct{}
	closing atomic.Bool

	// memMu guards the memory shared with the daemon (AllocMemory): the
	// last region ID, and the regions the rings' ends know of.
	memMu   sync.Mutex
	memLast uint32
	mem     []shmlink.MemRegion
}

type reply struct {
	r   daemonapi.Reply
	fds []int
}

// read receives the daemon's replies; when the connection ends, the
// device is gone: its links fail, so its workers stop with ErrGone.
func (cl *client) read() {
	for {
		var r daemonapi.Reply
		fds, err := daemonapi.Read(cl.c, &r)
		if err != nil {
			cl.fail(ErrGone)
			if !cl.closing.Load() {
				close(cl.lost)
			}
			return
		}
		select {
		case cl.replies <- reply{r, fds}:
		default:
			closeFDs(fds) // an answer nobody asked for
		}
	}
}

func (cl *client) fail(err error) {
	cl.once.Do(func() {
		cl.err = err
		for _, r := range cl.regions {
			r.AppEnd().Fail(err)
		}
		close(cl.gone)
	})
}

// call sends req, with descriptors fds (the caller keeps its own), and
// waits for the daemon's answer.
func (cl *client) call(req daemonapi.Request, fds ...int) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	select {
	case <-cl.gone:
		return cl.err
	default:
	}
	if err := daemonapi.Write(cl.c, req, fds); err != nil {
		cl.fail(ErrGone)
		return ErrGone
	}
	select {
	case rep := <-cl.replies:
		closeFDs(rep.fds)
		if err := rep.r.Error(); err != nil {
			if errors.Is(err, daemonapi.ErrQPNInUse) {
				return fmt.Errorf("%w: %w", ErrQPNInUse, err)
			}
			return err
		}
		return nil
	case <-cl.gone:
		return cl.err
	case <-time.After(5 * time.Second):
		// A late answer would be taken for the next call's: give the
		// daemon up instead.
		cl.fail(ErrGone)
		_ = cl.c.Close()
		return fmt.Errorf("%w: no answer to %s in 5 s", ErrGone, req.Op)
	}
}

func (cl *client) SetQP(qpn, _ uint32) error {
	return cl.call(daemonapi.Request{Op: daemonapi.OpSetQP, QPN: qpn})
}

func (cl *client) DeleteQP(qpn uint32) error {
	cl.drainTx()
	return cl.call(daemonapi.Request{Op: daemonapi.OpDeleteQP, QPN: qpn})
}

// drainWait bounds drainTx: a daemon that stopped taking frames cannot
// hold a close up for longer.
const drainWait = 100 * time.Millisecond

// drainTx waits until the daemon took what this application put on its
// rings. The daemon checks each frame's source QPN against its owner when
// it takes it: a queue pair that sent and is destroyed at once (a UD
// send completes when its frame is on the ring) would otherwise lose its
// last frames, denied, to its own DeleteQP.
func (cl *client) drainTx() {
	select {
	case <-cl.gone:
		return
	default:
	}
	deadline := time.Now().Add(drainWait)
	for _, r := range cl.regions {
		for r.AppEnd().TxPending() > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (cl *client) Connected(qpn uint32, peer netip.Addr, destQPN uint32) error {
	return cl.call(daemonapi.Request{Op: daemonapi.OpConnect, QPN: qpn, Peer: peer, DestQPN: destQPN})
}

func (cl *client) Listen(service uint64) error {
	return cl.call(daemonapi.Request{Op: daemonapi.OpListen, Service: service})
}

func (cl *client) Unlisten(service uint64) error {
	return cl.call(daemonapi.Request{Op: daemonapi.OpUnlisten, Service: service})
}

// CommIDPrefix is the daemon's number for this application, as the top
// 16 bits of its RDMA-CM communication IDs carry it.
func (cl *client) CommIDPrefix() uint32 { return cl.app & 0xffff }

func (cl *client) closeRegions() {
	for _, r := range cl.regions {
		_ = r.Close()
	}
}

func (cl *client) close() error {
	cl.closing.Store(true)
	err := cl.c.Close() // the daemon releases our QPNs and rings
	cl.fail(ErrGone)
	cl.closeRegions()
	return err
}

// attachedPace is how an attached device's workers back off when idle.
// The daemon's workers poll on the same cores: on a small host (fewer
// than 8 CPUs) they sleep soon (64 B write rate 0.67–0.96 × in process on
// 2 vCPUs, 0.5–0.6 × with the in-process default), on a larger one they
// poll longer. SOFTFABRIC_ATTACH_SPIN and SOFTFABRIC_ATTACH_YIELD (empty
// polls) override the choice.
func attachedPace() engine.Backoff {
	b := engine.Backoff{Spin: 64, Yield: 64}
	if runtime.NumCPU() >= 8 {
		b.Spin = 4000
	}
	if n, err := strconv.Atoi(os.Getenv("SOFTFABRIC_ATTACH_SPIN")); err == nil && n > 0 {
		b.Spin = n
	}
	if n, err := strconv.Atoi(os.Getenv("SOFTFABRIC_ATTACH_YIELD")); err == nil && n > 0 {
		b.Yield = n
	}
	return b
}
