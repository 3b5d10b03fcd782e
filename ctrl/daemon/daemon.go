// Package daemon is the softfabric daemon: the process that owns a
// device (its classifier, its AF_XDP sockets and a worker per queue) and
// serves the applications on the host that use it, as a kernel RDMA
// driver does, so that several of them share one NIC.
//
// Applications attach through a unix control socket in the device's run
// directory (ctrl/daemonapi; root, or members of Config.Group, checked
// with SO_PEERCRED) and get, per queue, a shared-memory region of frame
// rings with pipe doorbells (dataplane/link/shmlink). Each
// application runs its own transport engine over those rings (package
// device, Attach), so a fault in one stays in its own process; the
// daemon is the switch between the NIC and them:
//
//   - Receive: a worker takes the frames of its queue from the AF_XDP
//     socket and copies each into the ring of the application that owns
//     its destination QPN (registered over the control socket; the
//     classifier steers only registered QPNs here). Frames for no
//     application are counted and dropped.
//   - Transmit: the worker takes the frames each application put on its
//     ring for this queue and sends those the application may send: from
//     the device's own MAC and addresses, RoCEv2, and either a UD request
//     from one of its own QPNs or an RC packet to a peer (GID and QPN)
//     one of its queue pairs is connected to. Anything else is counted as
//     denied and dropped: an application cannot speak for another's queue
//     pairs, on the wire or to another application.
//
// Memory isolation follows: an application's memory regions live in its
// own process; a peer reaches them only through that application's queue
// pairs and keys. An application may also share memory with the daemon
// (memfds it hands over, sealed so that they cannot shrink: memory.go),
// where the daemon can place the payloads of frames for it.
//
// When an application's control connection closes (it exited or was
// killed), the daemon unregisters its QPNs at once (its peers' requests
// go unanswered and end in retry-exceeded, the IBTA outcome of a dead
// responder), waits for its workers to pass, and unmaps its rings and the
// memory it shared. When the daemon stops, applications see their control
// socket close and fail their device with device.ErrGone.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/device"
)

// Config describes a daemon.
type Config struct {
	// Iface is the interface `softfabric up` prepared.
	Iface string
	// Queues limits the queues served (0: all).
	Queues int
	// CPUs pins worker i to CPUs[i % len(CPUs)] (empty: not pinned).
	CPUs []int
	// Group, if set, is a group whose members may attach besides root.
	Group string
	// Slots and SlotSize size each application's rings (0: defaults).
	Slots, SlotSize int
	// MaxApps is how many applications may be attached at once (0:
	// defaultMaxApps); one more is refused.
	MaxApps int
	// MaxRegions is how many shared memory regions the daemon maps for
	// all its applications together (0: half of vm.max_map_count); one
	// more is refused.
	MaxRegions int
	// Metrics, if set, is the address to serve Prometheus metrics on
	// (/metrics).
	Metrics string
	// Logf, if set, reports attachments and detachments.
	Logf func(format string, args ...any)
}

// Daemon serves one device.
type Daemon struct {
	cfg   Config
	q     *device.Queues
	ln    *net.UnixListener
	gid   int // Config.Group's gid, -1 when none
	since time.Time
	mac   [6]byte
	gids  []netip.Addr // as ctrl.GIDs gives them (IPv4-mapped), for the applications
	srcs  []netip.Addr // the same, unmapped: the source addresses a frame may carry

	owner []atomic.Pointer[app]        // by QPN
	rx    []atomic.Uint64              // by QPN: where its packets arrive, how far (route.go)
	rxEnd []atomic.Uint32              // by QPN: the furthest message end delivered (route.go)
	gen   []atomic.Uint32              // by QPN: bumped when taken, connected, released; expectations of another are void
	fwd   atomic.Pointer[[]*forwarder] // queues that came into use later (forward.go)
	cm    atomic.Pointer[cmRoutes]
	apps  atomic.Pointer[[]*app]

	mu     sync.Mutex // guards app set changes and owner writes
	nextID uint32
	conns  map[*net.UnixConn]struct{}
	// refusing is how many of conns are of users it does not admit;
	// refused and dropped count such connections, and those it closed at
	// once, past its limits (daemonapi.Stats).
	refusing         int
	refused, dropped uint64

	workers []*worker
	running sync.WaitGroup // the workers' goroutines
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  sync.Once
	err     error
}

// Start opens the device's queues exclusively, listens on its control
// socket and starts a worker per queue.
func Start(cfg Config) (_ *Daemon, err error) {
	d := &Daemon{cfg: cfg, gid: -1, since: time.Now(), owner: make([]atomic.Pointer[app], engine.MaxQPN),
		rx: make([]atomic.Uint64, engine.MaxQPN), rxEnd: make([]atomic.Uint32, engine.MaxQPN), gen: make([]atomic.Uint32, engine.MaxQPN), conns: map[*net.UnixConn]struct{}{}}
	d.apps.Store(&[]*app{})
	d.fwd.Store(&[]*forwarder{})
	if cfg.Group != "" {
		g, err := user.LookupGroup(cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("daemon: group %q: %w", cfg.Group, err)
		}
		d.gid, _ = strconv.Atoi(g.Gid)
	}
	// Spare chunks: room to park a ring's worth of frames for
	// applications whose rings are full (park.go).
	d.q, err = device.OpenQueues(cfg.Iface, device.OpenOptions{Queues: cfg.Queues, Spare: parkSpare})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = d.q.Close()
		}
	}()
	copy(d.mac[:], d.q.Dev.MAC)
	d.gids = ctrl.GIDs(d.q.Dev)
	for _, g := range d.gids {
		d.srcs = append(d.srcs, g.Unmap())
	}
	if d.cfg.SlotSize == 0 {
		// A ring slot holds the largest frame a socket receives.
		d.cfg.SlotSize = max(4096, (d.q.Sockets[0].MaxFrame()+63)&^63)
	}
	if d.cfg.Slots == 0 {
		d.cfg.Slots = ringSlots(len(d.q.Sockets), d.cfg.SlotSize)
	}
	path := daemonapi.SocketPath(d.q.RunDir)
	_ = os.Remove(path) // left by a daemon that died: we hold owner.lock now
	d.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	d.ln.SetUnlinkOnClose(true)
	// Anyone may reach the socket: the daemon checks who connects
	// (SO_PEERCRED) and tells a user it refuses why, rather than leaving
	// them at a "permission denied" on a path.
	if err := os.Chmod(path, 0o666); err != nil {
		_ = d.ln.Close()
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	for dir := d.q.RunDir; len(dir) > 1 && dir != filepath.Dir(filepath.Dir(filepath.Dir(d.q.RunDir))); dir = filepath.Dir(dir) {
		_ = os.Chmod(dir, 0o711) // the run directories: searchable, not listable
	}
	if err := d.q.SaveSockets(); err != nil {
		_ = d.ln.Close()
		return nil, err
	}
	pidPath := filepath.Join(d.q.RunDir, daemonapi.PIDName)
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		_ = d.ln.Close()
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.q.OnClose(func() error { return os.Remove(pidPath) })
	// QP1 is the daemon's: it routes the CM MADs that arrive there (gsi.go).
	if err := d.q.Classifier.SetQP(engine.GSIQPN, 0); err != nil {
		_ = d.ln.Close()
		return nil, fmt.Errorf("daemon: steering QP1: %w", err)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	for i, s := range d.q.Sockets {
		w, err := newWorker(d, i, s)
		if err != nil {
			d.cancel()
			_ = d.ln.Close()
			for _, w := range d.workers {
				w.close()
			}
			return nil, err
		}
		d.workers = append(d.workers, w)
	}
	connectHands(d.workers)
	for _, w := range d.workers {
		d.wg.Add(1)
		d.running.Add(1)
		go func() {
			defer d.wg.Done()
			defer d.running.Done()
			if err := w.run(d.ctx); err != nil && d.ctx.Err() == nil {
				d.fail(fmt.Errorf("worker %d: %w", w.q, err))
			}
		}()
	}
	d.wg.Add(2)
	go func() { defer d.wg.Done(); d.accept() }()
	go func() { defer d.wg.Done(); d.housekeep() }()
	if cfg.Metrics != "" {
		if err := d.ServeMetrics(cfg.Metrics); err != nil {
			_ = d.Close()
			return nil, err
		}
	}
	return d, nil
}

// RunDir is the device's run directory (its state, socket and pid file).
func (d *Daemon) RunDir() string { return d.q.RunDir }

// Done is closed when the daemon stops (Close, or a worker failed).
func (d *Daemon) Done() <-chan struct{} { return d.ctx.Done() }

// Err is why the daemon stopped on its own, nil otherwise.
func (d *Daemon) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *Daemon) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
	d.cancel()
}

// Close stops serving: applications see their control socket close,
// the workers stop, the queues and the classifier's entries are released.
func (d *Daemon) Close() error {
	var err error
	d.closed.Do(func() {
		d.cancel()
		_ = d.ln.Close()
		d.mu.Lock()
		for c := range d.conns {
			_ = c.Close()
		}
		d.mu.Unlock()
		d.wg.Wait()
		for _, a := range *d.apps.Load() {
			a.release()
		}
		for _, w := range d.workers {
			w.close()
		}
		err = d.q.Close()
	})
	return err
}

func (d *Daemon) logf(format string, args ...any) {
	if d.cfg.Logf != nil {
		d.cfg.Logf(format, args...)
	}
}

// Run serves iface until ctx ends or the daemon fails.
func Run(ctx context.Context, cfg Config, ready func(*Daemon)) error {
	d, err := Start(cfg)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(d)
	}
	select {
	case <-ctx.Done():
	case <-d.Done():
	}
	cerr := d.Close()
	if err := d.Err(); err != nil {
		return err
	}
	return cerr
}

// housekeep detaches applications whose rings a worker found corrupt
// (every 50 ms), stops the daemon when its interface or its record is
// gone or stale (the namespace deleted, its record removed, the
// classifier detached behind its back), and serves the queues the device
// came to use (every 500 ms).
func (d *Daemon) housekeep() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	growErr := "" // logged once
	for i := 0; ; i++ {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
		if i%10 == 9 {
			dev, err := d.stillThere()
			if err != nil {
				d.logf("stopping: %v", err)
				d.fail(err)
				return
			}
			if err := d.grow(dev); err != nil && err.Error() != growErr {
				d.logf("serving the queues that came into use: %v", err)
				growErr = err.Error()
			}
		}
		for _, a := range *d.apps.Load() {
			if a.corrupt() && !a.bad.Swap(true) {
				d.logf("app %d (pid %d): corrupt rings, detached", a.id, a.pid)
				_ = a.conn.Close() // serve's read ends and detaches it
			}
		}
	}
}

// ErrDeviceRemoved is why a daemon stops when its device went away.
var ErrDeviceRemoved = errors.New("daemon: the device went away")

// stillThere checks the device as `up` and Open do: the interface is
// there and its record (ctrl.State) still describes it. It returns the
// device as it looked it up, nil after a netlink hiccup (look again
// later).
func (d *Daemon) stillThere() (*ctrl.Device, error) {
	dev, err := ctrl.LookupDevice(d.cfg.Iface)
	if errors.Is(err, ctrl.ErrNoDevice) {
		return nil, fmt.Errorf("%w: %s is gone", ErrDeviceRemoved, d.cfg.Iface)
	}
	if err != nil {
		return nil, nil
	}
	st, err := ctrl.LoadState(d.q.RunDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is no longer up (its record is gone)", ErrDeviceRemoved, d.cfg.Iface)
	}
	if err == nil {
		if err := st.Current(dev); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrDeviceRemoved, d.cfg.Iface, err)
		}
	}
	return dev, nil
}

// authorize checks the peer's credentials: root, or a member of the
// configured group.
func (d *Daemon) authorize(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	if cred.Uid == 0 || d.gid >= 0 && (int(cred.Gid) == d.gid || inGroup(int(cred.Pid), d.gid)) {
		return cred, nil
	}
	return cred, errNotAdmitted
}

// errNotAdmitted is what authorize reports of a user the daemon does not
// admit; refusal says why, for the user to read.
var errNotAdmitted = errors.New("not admitted")

// refusal is the error a user the daemon does not admit gets: off the
// accept loop, since naming the user may read the user database.
func (d *Daemon) refusal(cred *unix.Ucred, err error) error {
	if !errors.Is(err, errNotAdmitted) || cred == nil {
		return fmt.Errorf("%w: %v", daemonapi.ErrDenied, err)
	}
	who := strconv.Itoa(int(cred.Uid))
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	if d.gid >= 0 {
		return fmt.Errorf("%w: user %s is not root and not in group %s", daemonapi.ErrDenied, who, d.cfg.Group)
	}
	return fmt.Errorf("%w: user %s is not root (start the daemon with --group to admit a group)", daemonapi.ErrDenied, who)
}

// inGroup reports whether process pid has gid among its supplementary
// groups.
func inGroup(pid, gid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, f := range strings.Fields(rest) {
				if g, err := strconv.Atoi(f); err == nil && g == gid {
					return true
				}
			}
		}
	}
	return false
}

// Connections to the control socket, which any local user may open (its
// mode is 0666, so that a group can be admitted): those of users the
// daemon admits, at most maxConns() at once, and of others, at most
// maxRefused at once, each answered with its refusal and closed within
// refuseWithin. Past either limit a connection is closed at once. So
// users the daemon does not admit cannot use up its descriptors, nor
// crowd out the ones it admits.
const (
	maxRefused   = 32
	refuseWithin = 2 * time.Second
)

// maxConns is how many connections of admitted users the daemon keeps
// at once: its applications' and some more (status queries, attaching).
func (d *Daemon) maxConns() int { return d.maxApps() + 64 }

func (d *Daemon) accept() {
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			return
		}
		cred, authErr := d.authorize(c)
		d.mu.Lock()
		if d.ctx.Err() != nil {
			d.mu.Unlock()
			_ = c.Close()
			return
		}
		if authErr != nil && d.refusing >= maxRefused || authErr == nil && len(d.conns)-d.refusing >= d.maxConns() {
			d.dropped++
			d.mu.Unlock()
			_ = c.Close()
			continue
		}
		d.conns[c] = struct{}{}
		if authErr != nil {
			d.refusing++
			d.refused++
		}
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			if authErr != nil {
				d.refuse(c, cred, authErr)
			} else {
				d.serve(c, cred)
			}
			d.mu.Lock()
			delete(d.conns, c)
			if authErr != nil {
				d.refusing--
			}
			d.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// refuse answers the first request of a connection of a user the daemon
// does not admit (cred; nil when unknown; err from authorize) with the
// refusal, and returns: within refuseWithin, whatever the client does.
func (d *Daemon) refuse(c *net.UnixConn, cred *unix.Ucred, err error) {
	_ = c.SetDeadline(time.Now().Add(refuseWithin))
	var req daemonapi.Request
	fds, rerr := daemonapi.Read(c, &req)
	closeFDs(fds)
	if rerr != nil {
		return
	}
	err = d.refusal(cred, err)
	if req.Op == daemonapi.OpAttach && cred != nil {
		d.logf("refused pid %d uid %d: %v", cred.Pid, cred.Uid, err)
	}
	_ = daemonapi.Write(c, daemonapi.Fail(err), nil)
}

// serve answers one connection of a user the daemon admits (cred): an
// attached application's, or a status query's.
func (d *Daemon) serve(c *net.UnixConn, cred *unix.Ucred) {
	var a *app
	defer func() {
		if a != nil {
			d.detach(a)
		}
	}()
	for {
		var req daemonapi.Request
		fds, err := daemonapi.Read(c, &req)
		if err != nil {
			return
		}
		if req.Op != daemonapi.OpAddMemory {
			closeFDs(fds) // only add_memory carries one
			fds = nil
		}
		var rep daemonapi.Reply
		var out []int
		switch req.Op {
		case daemonapi.OpStats:
			rep.Stats = d.stats()
		case daemonapi.OpAttach:
			if a != nil {
				rep = daemonapi.Fail(fmt.Errorf("%w: attached already", daemonapi.ErrInvalid))
				break
			}
			var err error
			a, err = d.attach(c, cred, req)
			if err != nil {
				rep = daemonapi.Fail(err)
				a = nil
				break
			}
			rep.Attach = d.attachInfo(a)
			for _, r := range a.regions {
				fds := r.FDs()
				out = append(out, fds[:]...)
			}
		case daemonapi.OpReport:
			if a == nil || req.Transport == nil {
				rep = daemonapi.Fail(fmt.Errorf("%w: report before attach, or empty", daemonapi.ErrInvalid))
				break
			}
			a.transport.Store(req.Transport)
		case daemonapi.OpSetQP, daemonapi.OpDeleteQP, daemonapi.OpConnect, daemonapi.OpListen, daemonapi.OpUnlisten:
			if a == nil {
				rep = daemonapi.Fail(fmt.Errorf("%w: %s before attach", daemonapi.ErrInvalid, req.Op))
				break
			}
			if err := d.qpOp(a, req); err != nil {
				rep = daemonapi.Fail(err)
			}
		case daemonapi.OpAddMemory, daemonapi.OpDeleteMemory:
			if a == nil {
				closeFDs(fds)
				rep = daemonapi.Fail(fmt.Errorf("%w: %s before attach", daemonapi.ErrInvalid, req.Op))
				break
			}
			if err := d.memOp(a, req, fds); err != nil {
				rep = daemonapi.Fail(err)
			}
		default:
			rep = daemonapi.Fail(fmt.Errorf("%w: operation %q", daemonapi.ErrInvalid, req.Op))
		}
		if err := daemonapi.Write(c, rep, out); err != nil {
			return
		}
	}
}

func (d *Daemon) attachInfo(a *app) *daemonapi.AttachInfo {
	return &daemonapi.AttachInfo{App: a.id, Iface: d.q.Dev.Name, Ifindex: d.q.Dev.Index, MAC: d.mac, MTU: d.q.Dev.MTU,
		GIDs: d.gids, Queues: len(d.workers), Slots: a.regions[0].Config().Slots, SlotSize: a.regions[0].Config().SlotSize}
}

func (d *Daemon) attach(c *net.UnixConn, cred *unix.Ucred, req daemonapi.Request) (*app, error) {
	if req.Version != daemonapi.Version {
		return nil, fmt.Errorf("%w: the daemon speaks %d, the application %d", daemonapi.ErrVersion, daemonapi.Version, req.Version)
	}
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	d.mu.Unlock()
	a := &app{id: id, pid: int(cred.Pid), uid: int(cred.Uid), name: req.Name, since: time.Now(), conn: c,
		qps: map[uint32]struct{}{}, conns: map[uint32][]peerKey{}, st: make([]appCounters, len(d.workers))}
	a.publishPeers()
	a.mem.Store(&map[uint32][]byte{})
	for i := range d.workers {
		r, err := shmlink.Create(fmt.Sprintf("softfabric-%s-app%d-q%d", d.q.Dev.Name, id, i),
			shmlink.Config{Slots: d.cfg.Slots, SlotSize: d.cfg.SlotSize})
		if err != nil {
			a.release()
			return nil, err
		}
		a.regions = append(a.regions, r)
		a.ends = append(a.ends, r.DaemonEnd())
	}
	d.mu.Lock()
	cur := *d.apps.Load()
	if n := d.maxApps(); len(cur) >= n {
		d.mu.Unlock()
		a.release()
		return nil, fmt.Errorf("%w: the daemon already serves %d applications, its limit (up --max-apps)", daemonapi.ErrInvalid, n)
	}
	next := append(slices.Clone(cur), a)
	d.apps.Store(&next)
	d.mu.Unlock()
	for _, w := range d.workers {
		w.kick()
	}
	d.logf("app %d attached: pid %d uid %d %q", a.id, a.pid, a.uid, a.name)
	return a, nil
}

func (d *Daemon) qpOp(a *app, req daemonapi.Request) error {
	qpn := req.QPN
	if req.Op == daemonapi.OpListen || req.Op == daemonapi.OpUnlisten {
		qpn = engine.GSIQPN
	}
	if qpn < engine.GSIQPN || qpn >= engine.MaxQPN {
		return fmt.Errorf("%w: QPN %d outside [%d, %d)", daemonapi.ErrInvalid, qpn, engine.GSIQPN, engine.MaxQPN)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if qpn == engine.GSIQPN || req.Op == daemonapi.OpListen || req.Op == daemonapi.OpUnlisten {
		return d.cmOp(a, req)
	}
	switch req.Op {
	case daemonapi.OpSetQP:
		if o := d.owner[qpn].Load(); o != nil {
			if o == a {
				return nil
			}
			return fmt.Errorf("%w: QPN %d belongs to another application", daemonapi.ErrQPNInUse, qpn)
		}
		if len(a.qps) >= maxAppQPs {
			return fmt.Errorf("%w: QPN %d: the application holds %d queue pair numbers, the most it may", daemonapi.ErrInvalid, qpn, len(a.qps))
		}
		if err := d.q.Classifier.SetQP(qpn, 0); err != nil {
			return fmt.Errorf("%w: classifier: %v", daemonapi.ErrInvalid, err)
		}
		a.qps[qpn] = struct{}{}
		d.restart(qpn)
		d.owner[qpn].Store(a)
	case daemonapi.OpDeleteQP:
		if d.owner[qpn].Load() != a {
			return fmt.Errorf("%w: QPN %d is not this application's", daemonapi.ErrInvalid, qpn)
		}
		d.unown(a, qpn)
	case daemonapi.OpConnect:
		if d.owner[qpn].Load() != a {
			return fmt.Errorf("%w: QPN %d is not this application's", daemonapi.ErrInvalid, qpn)
		}
		if !req.Peer.IsValid() || req.DestQPN >= 1<<24 {
			return fmt.Errorf("%w: connect to %v QPN %d", daemonapi.ErrInvalid, req.Peer, req.DestQPN)
		}
		a.conns[qpn] = connectTo(a.conns[qpn], peerKey{req.Peer.Unmap(), req.DestQPN})
		a.publishPeers()
		d.restart(qpn) // a new PSN space, perhaps a new path
	}
	return nil
}

// An application's rings are two per queue the daemon serves, each of
// Slots slots of SlotSize bytes and a header line, and all of a ring's
// pages are resident once it has gone round (a memfd's). 1024 slots hold
// several flights of 64 KiB messages at a 1024 B MTU; but on a NIC with
// many queues that is much: 64 queues of 1024 slots of 4 KiB are 545 MB
// per application. So a daemon of more than a few queues gives each ring
// fewer slots, down to minRingSlots, to keep an application's rings near
// ringBudget. Fewer slots lose no frames: a ring to the application that
// fills parks them (park.go), and a ring from it that fills holds the
// application back.
const (
	maxRingSlots = 1024
	minRingSlots = 256
	ringBudget   = 32 << 20
)

// ringSlots is how many slots each ring of an application has, on a
// daemon of queues queues and slots of slotSize bytes.
func ringSlots(queues, slotSize int) int {
	per := 2 * max(queues, 1) * (slotSize + 64) // bytes per slot of every ring
	n := maxRingSlots
	for n > minRingSlots && n*per > ringBudget {
		n /= 2
	}
	return n
}

// Limits on what one application holds: queue pair numbers (a quarter of
// the device's: one application cannot take them all from the others),
// and the peers each of its queue pairs was connected to, the latest
// kept (an RC queue pair has one; those before stay allowed a while, for
// frames still in flight when it was connected again).
const (
	maxAppQPs  = engine.MaxQPN / 4
	maxQPPeers = 8
)

// connectTo adds peer k to ks, the peers a queue pair was connected to,
// once, as the latest, keeping at most maxQPPeers.
func connectTo(ks []peerKey, k peerKey) []peerKey {
	ks = slices.DeleteFunc(ks, func(x peerKey) bool { return x == k })
	if len(ks) >= maxQPPeers {
		ks = slices.Delete(ks, 0, len(ks)-maxQPPeers+1)
	}
	return append(ks, k)
}

// unown releases qpn from a (d.mu held): its frames stop reaching a, and
// the connections of the queue pair stop being a's to send on.
func (d *Daemon) unown(a *app, qpn uint32) {
	d.owner[qpn].Store(nil)
	d.restart(qpn)
	_ = d.q.Classifier.DeleteQP(qpn)
	delete(a.qps, qpn)
	if len(a.conns[qpn]) > 0 {
		delete(a.conns, qpn)
		a.publishPeers()
	}
}

// detach removes an application: its QPNs at once, its rings and shared
// memory once every worker has passed the point where it could still be
// using them.
func (d *Daemon) detach(a *app) {
	d.mu.Lock()
	for qpn := range a.qps {
		d.unown(a, qpn)
	}
	d.detachCM(a)
	cur := *d.apps.Load()
	next := slices.DeleteFunc(slices.Clone(cur), func(x *app) bool { return x == a })
	d.apps.Store(&next)
	d.mu.Unlock()
	d.quiesce()
	a.release()
	d.logf("app %d (pid %d) detached", a.id, a.pid)
}

// quiesce returns once no worker holds what was unpublished before the
// call (an application, a memory region): each has begun a new pass, or,
// the daemon stopping, they have all returned (a worker's last pass may
// still be running when quiesce sees it stopping).
func (d *Daemon) quiesce() {
	for _, w := range d.workers {
		w.quiesce()
	}
	if d.ctx != nil && d.ctx.Err() != nil {
		d.running.Wait()
	}
}

func (d *Daemon) stats() *daemonapi.Stats {
	st := &daemonapi.Stats{PID: os.Getpid(), Iface: d.q.Dev.Name, Since: d.since, RingSlots: d.cfg.Slots, SlotSize: d.cfg.SlotSize,
		RingBytes: uint64(len(d.workers)) * shmlink.Size(shmlink.Config{Slots: d.cfg.Slots, SlotSize: d.cfg.SlotSize})}
	for _, w := range d.workers {
		st.Workers = append(st.Workers, w.stats())
	}
	st.Workers = append(st.Workers, d.forwarderStats()...)
	d.mu.Lock()
	defer d.mu.Unlock()
	st.Refused, st.Dropped = d.refused, d.dropped
	for _, a := range *d.apps.Load() {
		as := daemonapi.AppStats{ID: a.id, PID: a.pid, UID: a.uid, Name: a.name, Since: a.since, Conns: len(*a.peers.Load()),
			Transport: a.transport.Load()}
		mem := *a.mem.Load()
		as.MemRegions, as.MemBytes = len(mem), memBytes(mem)
		for q := range a.qps {
			as.QPs = append(as.QPs, q)
		}
		slices.Sort(as.QPs)
		for i := range a.st {
			c := &a.st[i]
			as.RxFrames += c.rx.Load()
			as.TxFrames += c.tx.Load()
			as.Denied += c.denied.Load()
			as.Dropped += c.dropped.Load()
			as.Placed += c.placed.Load()
			as.Gathered += c.gathered.Load()
			as.Expectations += c.expects.Load()
			as.ExpectationsRefused += c.badExpects.Load()
		}
		st.Apps = append(st.Apps, as)
	}
	return st
}

// Query asks the daemon serving the device in runDir for its statistics.
func Query(runDir string) (*daemonapi.Stats, error) {
	c, err := daemonapi.Dial(runDir)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	rep, _, err := daemonapi.Call(c, daemonapi.Request{Op: daemonapi.OpStats})
	if err != nil {
		return nil, err
	}
	if rep.Stats == nil {
		return nil, errors.New("daemon: empty stats reply")
	}
	return rep.Stats, nil
}

// restart forgets where queue pair qpn's packets arrived and how far they
// went, and voids the expectations taken for it (route.go): it was taken,
// connected (a new PSN space) or released.
func (d *Daemon) restart(qpn uint32) {
	d.gen[qpn].Add(1)
	d.rx[qpn].Store(0)
	d.rxEnd[qpn].Store(0)
}
