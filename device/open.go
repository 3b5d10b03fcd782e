package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"sync"

	"github.com/softfabric/softfabric/bpf"
	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/faulty"
	"github.com/softfabric/softfabric/dataplane/xsk"
)

// ErrNotUp is returned by Open for an interface `softfabric up` has not
// prepared.
var ErrNotUp = errors.New("softfabric is not up on this interface")

// ErrBusy is returned by OpenAny when the device has no free hardware
// context for another opener (an HFI unit whose user contexts are all
// assigned: ASSIGN_CTXT's EBUSY).
var ErrBusy = errors.New("device busy: no free context")

// OpenOptions tune Open.
type OpenOptions struct {
	// Queues limits the receive queues served (0: all of them).
	Queues int
	// CPUs pins the workers (see Options.CPUs).
	CPUs []int
	// Peers is, for a device whose opener wants one (an HFI unit,
	// hfi1_N), the file of its peers' addresses ("" means the opener's
	// default).
	Peers string
	// Spare is how many received frames each AF_XDP socket lets its
	// consumer keep aside (xsk.Config.Spare): the daemon's room for
	// frames for an application whose ring is full.
	Spare int
}

// An Opener opens the devices whose names it claims: a device that is
// not an interface `softfabric up` prepared (an HFI unit).
type Opener struct {
	Claims func(name string) bool
	Open   func(name string, o OpenOptions) (*Device, error)
}

var openers struct {
	sync.Mutex
	list []Opener
}

// RegisterOpener makes OpenAny open the names o claims with o.Open: how
// hfidev/hfidevice adds hfi1_N without this package importing it.
func RegisterOpener(o Opener) {
	openers.Lock()
	defer openers.Unlock()
	openers.list = append(openers.list, o)
}

// claimed returns the Open of the first opener claiming name, or nil.
func claimed(name string) func(string, OpenOptions) (*Device, error) {
	openers.Lock()
	defer openers.Unlock()
	for _, o := range openers.list {
		if o.Claims(name) {
			return o.Open
		}
	}
	return nil
}

// Queues are the AF_XDP sockets of a device that `softfabric up`
// prepared, each entered into the classifier's socket map, held
// exclusively (owner.lock): what Open runs workers on, and what the
// daemon (ctrl/daemon) serves applications from.
type Queues struct {
	Dev        *ctrl.Device
	State      *ctrl.State
	RunDir     string
	Classifier *bpf.Classifier
	Sockets    []*xsk.Socket
	closers    []func() error
	limit      int  // OpenOptions.Queues
	spare      int  // OpenOptions.Spare
	saved      bool // the sockets are recorded (saveSockets)
}

// Close gives the queues up, in the reverse order of opening.
func (q *Queues) Close() error {
	var errs []error
	for i := len(q.closers) - 1; i >= 0; i-- {
		errs = append(errs, q.closers[i]())
	}
	q.closers = nil
	return errors.Join(errs...)
}

// OnClose adds f to what Close runs (first).
func (q *Queues) OnClose(f func() error) { q.closers = append(q.closers, f) }

// Options are the device facts for NewWorkers over these queues.
func (q *Queues) Options(cpus []int) Options {
	var mac [6]byte
	copy(mac[:], q.Dev.MAC)
	return Options{
		Name:      q.Dev.Name,
		MAC:       mac,
		GIDs:      ctrl.GIDs(q.Dev),
		MTU:       q.Dev.MTU,
		Resolve:   resolve,
		Registrar: q.Classifier,
		CPUs:      cpus,
	}
}

// OpenQueues takes the queues of iface exclusively and binds an AF_XDP
// socket to each, entered into the classifier's socket map.
func OpenQueues(iface string, o OpenOptions) (q *Queues, err error) {
	if err := ctrl.EnsureBPFFS(); err != nil {
		return nil, err
	}
	dev, err := ctrl.LookupDevice(iface)
	if err != nil {
		return nil, err
	}
	runDir := ctrl.RunDir(dev.NetNS, iface)
	st, err := ctrl.LoadState(runDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %s (run 'softfabric up %s' first)", ErrNotUp, iface, iface)
	}
	if err != nil {
		return nil, err
	}
	if dev, err = st.Settled(dev); err != nil {
		return nil, fmt.Errorf("%w %s (%v; run 'softfabric up %s')", ErrNotUp, iface, err, iface)
	}
	lock, err := ctrl.LockDevice(runDir)
	if err != nil {
		return nil, err
	}
	q = &Queues{Dev: dev, State: st, RunDir: runDir}
	defer func() {
		if err != nil {
			_ = q.Close()
		}
	}()
	q.closers = append(q.closers, lock.Unlock)
	cls, err := bpf.Open(st.PinDir)
	if err != nil {
		return nil, fmt.Errorf("opening the classifier of %s: %w", iface, err)
	}
	q.Classifier = cls
	q.closers = append(q.closers, cls.Close)
	// We hold the device exclusively, so any QPN still steered to it was
	// left by an owner that died without cleaning up: forget them.
	if stale, err := cls.QPs(); err == nil {
		for qpn := range stale {
			_ = cls.DeleteQP(qpn)
		}
	}
	if err := q.reattachGrown(dev); err != nil {
		return nil, fmt.Errorf("%s: its channels grew since up: %w", iface, err)
	}
	q.limit, q.spare = o.Queues, o.Spare
	for i := 0; i < q.served(dev.Queues); i++ {
		if _, err := q.openSocket(i); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// openSocket binds an AF_XDP socket to queue i and enters it into the
// classifier's socket map, until Close.
func (q *Queues) openSocket(i int) (*xsk.Socket, error) {
	s, err := xsk.Open(xsk.Config{Ifindex: q.Dev.Index, Queue: i, MultiBuffer: q.State.Frags, Spare: q.spare})
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket on %s queue %d: %w", q.Dev.Name, i, err)
	}
	q.closers = append(q.closers, s.Close)
	if err := q.Classifier.SetSocket(0, i, s.FD()); err != nil {
		return nil, err
	}
	cls := q.Classifier
	q.closers = append(q.closers, func() error { return cls.DeleteSocket(0, i) })
	q.Sockets = append(q.Sockets, s)
	return s, nil
}

// served is how many of the n queues a device uses these queues serve:
// all, or as many as `up --queues` (the state's limit) and
// OpenOptions.Queues allow.
func (q *Queues) served(n int) int {
	for _, limit := range []int{q.State.QueueLimit, q.limit} {
		if limit > 0 && limit < n {
			n = limit
		}
	}
	return n
}

// reattachGrown attaches the classifier again when dev is a veth that
// uses more queues than when it was attached: veth does not run an
// attached program on receive queues added after it was attached
// (channels raised with ethtool -L while up; seen on 6.18: frames on a
// new queue skip XDP and die in the stack), so that every queue served
// runs it.
func (q *Queues) reattachGrown(dev *ctrl.Device) error {
	if dev.Kind != "veth" || dev.Queues <= q.State.Queues {
		return nil
	}
	return reattach(q.Classifier, q.State, dev.Queues, q.RunDir)
}

// Grow binds sockets to the queues device dev (these queues' device, as
// just looked up) has come to use since the queues were opened (its
// channels raised with ethtool -L), within the limits OpenQueues kept
// (`up --queues`, OpenOptions.Queues), and returns them: none when it
// uses no more. On veth it attaches the classifier again first, as
// OpenQueues does, so that the new queues run it. The caller serves the
// new sockets; the socket record (SaveSockets, when made) is written
// again.
func (q *Queues) Grow(dev *ctrl.Device) ([]*xsk.Socket, error) {
	queues := q.served(dev.Queues)
	have := len(q.Sockets)
	if queues <= have {
		return nil, nil
	}
	if err := q.reattachGrown(dev); err != nil {
		return nil, fmt.Errorf("%s: its channels grew: %w", dev.Name, err)
	}
	for i := have; i < queues; i++ {
		if _, err := q.openSocket(i); err != nil {
			return q.Sockets[have:], err
		}
	}
	if q.saved {
		if err := ctrl.SaveSockets(q.RunDir, socketRecord(q.Sockets, func(int) bool { return false })); err != nil {
			return q.Sockets[have:], err
		}
	}
	return q.Sockets[have:], nil
}

// Open opens the softfabric device on iface, which `softfabric up` has
// prepared, in this process: it takes the device's queues exclusively
// (OpenQueues), so that RoCEv2 frames for this process's queue pairs
// reach it, and gives each queue a worker.
func Open(iface string, o OpenOptions) (d *Device, err error) {
	q, err := OpenQueues(iface, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = q.Close()
		}
	}()
	opts := q.Options(o.CPUs)
	opts.Loopback = true
	links := make([]link.Link, len(q.Sockets))
	for i, s := range q.Sockets {
		links[i] = newLoopLink(s, opts.MAC, opts.GIDs)
	}
	links, err = debugLinks(links, iface, &q.closers)
	if err != nil {
		return nil, err
	}
	d = NewWorkers(links, opts)
	// With one worker per socket, the worker of a queue builds in place if
	// its link is the socket itself; the debugging aids wrap them, and copy.
	inPlace := func(i int) bool { return d.group.Len() == len(q.Sockets) && d.group.Node(i).TxInPlace() }
	if err := q.saveSockets(inPlace); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, q.Close)
	return d, nil
}

// SaveSockets records the queues' sockets for `softfabric status`, as
// their owner (the daemon) serves them: frames copied from the
// applications' rings into the UMEM. Close removes the record.
func (q *Queues) SaveSockets() error { return q.saveSockets(func(int) bool { return false }) }

// saveSockets records the sockets (ctrl.Sockets) until Close; inPlace
// tells whether queue i's frames are built in place in the UMEM.
func (q *Queues) saveSockets(inPlace func(i int) bool) error {
	if err := ctrl.SaveSockets(q.RunDir, socketRecord(q.Sockets, inPlace)); err != nil {
		return err
	}
	runDir := q.RunDir
	q.closers = append(q.closers, func() error { return ctrl.RemoveSockets(runDir) })
	q.saved = true
	return nil
}

func socketRecord(sockets []*xsk.Socket, inPlace func(q int) bool) *ctrl.Sockets {
	rec := &ctrl.Sockets{PID: os.Getpid()}
	for _, s := range sockets {
		c := s.Config()
		info := ctrl.SocketInfo{Queue: s.Queue(), Mode: "copy", RxRing: c.RxSize, TxRing: c.TxSize, FillRing: c.FillSize,
			CompRing: c.CompSize, Frames: c.Frames, FrameSize: c.FrameSize, MultiBuffer: c.MultiBuffer}
		if s.ZeroCopy() {
			info.Mode = "zero-copy"
		}
		info.InPlace = inPlace(s.Queue())
		rec.Queues = append(rec.Queues, info)
	}
	return rec
}

// debugLinks applies the debugging aids the environment asks for. They
// run the device with one worker over every queue (a multiLink), so that
// one capture file and one fault injector see all of its frames in order:
//
//   - SOFTFABRIC_DEBUG_PCAP=file records the frames this process sends and
//     receives (see debugCapture), which tcpdump cannot see: XDP
//     redirects them before the kernel's taps, and AF_XDP transmit
//     bypasses them. The capture sits right on the sockets, under the
//     fault injector below, so that it records what really went out (not
//     the frames the injector dropped, but its duplicates, corrupted bits
//     and reordering) and what really came in.
//   - SOFTFABRIC_DEBUG_LINK_FAULTS, a faulty.ParseSpec string like
//     "reorder=5%,delay=100us", impairs the frames sent, to watch the
//     transport cope with a bad network on a real NIC.
func debugLinks(links []link.Link, iface string, closers *[]func() error) ([]link.Link, error) {
	spec := os.Getenv("SOFTFABRIC_DEBUG_LINK_FAULTS")
	if os.Getenv(envPcap) == "" && spec == "" {
		return links, nil
	}
	l := newMultiLink(links)
	l, closeCapture, err := debugCapture(l, iface, os.Stderr)
	if err != nil {
		return nil, err
	}
	if closeCapture != nil {
		*closers = append(*closers, closeCapture)
	}
	if spec != "" {
		f, err := faulty.ParseSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("SOFTFABRIC_DEBUG_LINK_FAULTS: %w", err)
		}
		if l, err = faulty.Wrap(l, faulty.Config{Faults: f}); err != nil {
			return nil, err
		}
	}
	return []link.Link{l}, nil
}

// reattach attaches the classifier again in the mode up chose and records
// the queue count it now covers.
func reattach(cls *bpf.Classifier, st *ctrl.State, queues int, runDir string) error {
	mode, err := bpf.ParseMode(st.XDPMode)
	if err != nil {
		return err
	}
	if err := cls.Reattach(mode); err != nil {
		return err
	}
	st.Queues = queues
	return ctrl.SaveState(runDir, st)
}

func resolve(ctx context.Context, dst netip.Addr) (netip.Addr, [6]byte, error) {
	nh, err := ctrl.Resolve(ctx, dst)
	if errors.Is(err, ctrl.ErrLocal) {
		return netip.Addr{}, [6]byte{}, fmt.Errorf("%w: %v", ErrNoLoopback, err)
	}
	if err != nil {
		return netip.Addr{}, [6]byte{}, err
	}
	var mac [6]byte
	copy(mac[:], nh.MAC)
	return nh.Src, mac, nil
}
