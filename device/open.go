package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"

	"github.com/softfabric/softfabric/bpf"
	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/faulty"
	"github.com/softfabric/softfabric/dataplane/xsk"
)

// ErrNotUp is returned by Open for an interface `softfabric up` has not
// prepared.
var ErrNotUp = errors.New("softfabric is not up on this interface")

// OpenOptions tune Open.
type OpenOptions struct {
	// Queues limits the receive queues served (0: all of them).
	Queues int
	// CPUs pins the workers (see Options.CPUs).
	CPUs []int
}

// Open opens the softfabric device on iface, which `softfabric up` has
// prepared: it takes the device's queues exclusively, binds an AF_XDP
// socket to each and enters them into the classifier's socket map, so
// that RoCEv2 frames for this process's queue pairs reach it, and gives
// each queue a worker.
func Open(iface string, o OpenOptions) (d *Device, err error) {
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
	if err := st.Current(dev); err != nil {
		return nil, fmt.Errorf("%w %s (%v; run 'softfabric up %s')", ErrNotUp, iface, err, iface)
	}
	lock, err := ctrl.LockDevice(runDir)
	if err != nil {
		return nil, err
	}
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	closers = append(closers, lock.Unlock)
	cls, err := bpf.Open(st.PinDir)
	if err != nil {
		return nil, fmt.Errorf("opening the classifier of %s: %w", iface, err)
	}
	closers = append(closers, cls.Close)
	// We hold the device exclusively, so any QPN still steered to it was
	// left by an owner that died without cleaning up: forget them.
	if stale, err := cls.QPs(); err == nil {
		for qpn := range stale {
			_ = cls.DeleteQP(qpn)
		}
	}
	if dev.Kind == "veth" && dev.Queues > st.Queues {
		// veth does not run an attached program on receive queues added
		// after it was attached (channels raised with ethtool -L while up;
		// seen on 6.18: frames on a new queue skip XDP and die in the
		// stack). Attach it again, so that every queue served runs it.
		if err := reattach(cls, st, dev.Queues, runDir); err != nil {
			return nil, fmt.Errorf("%s: its channels grew since up: %w", iface, err)
		}
	}
	queues := dev.Queues
	if st.QueueLimit > 0 && st.QueueLimit < queues {
		queues = st.QueueLimit
	}
	if o.Queues > 0 && o.Queues < queues {
		queues = o.Queues
	}
	links := make([]link.Link, 0, queues)
	var sockets []*xsk.Socket
	for q := 0; q < queues; q++ {
		s, err := xsk.Open(xsk.Config{Ifindex: dev.Index, Queue: q, MultiBuffer: st.Frags})
		if err != nil {
			return nil, fmt.Errorf("AF_XDP socket on %s queue %d: %w", iface, q, err)
		}
		closers = append(closers, s.Close)
		if err := cls.SetSocket(0, q, s.FD()); err != nil {
			return nil, err
		}
		q := q
		closers = append(closers, func() error { return cls.DeleteSocket(0, q) })
		links = append(links, s)
		sockets = append(sockets, s)
	}
	links, err = debugLinks(links, iface, &closers)
	if err != nil {
		return nil, err
	}
	var mac [6]byte
	copy(mac[:], dev.MAC)
	d = NewWorkers(links, Options{
		Name:      iface,
		MAC:       mac,
		GIDs:      ctrl.GIDs(dev),
		MTU:       dev.MTU,
		Resolve:   resolve,
		Registrar: cls,
		CPUs:      o.CPUs,
	})
	if err := ctrl.SaveSockets(runDir, d.socketRecord(sockets)); err != nil {
		return nil, err
	}
	closers = append(closers, func() error { return ctrl.RemoveSockets(runDir) })
	d.closers = closers
	return d, nil
}

// socketRecord describes the device's AF_XDP sockets for `softfabric
// status` (see ctrl.Sockets).
func (d *Device) socketRecord(sockets []*xsk.Socket) *ctrl.Sockets {
	rec := &ctrl.Sockets{PID: os.Getpid()}
	for _, s := range sockets {
		c := s.Config()
		info := ctrl.SocketInfo{Queue: s.Queue(), Mode: "copy", RxRing: c.RxSize, TxRing: c.TxSize, FillRing: c.FillSize,
			CompRing: c.CompSize, Frames: c.Frames, FrameSize: c.FrameSize, MultiBuffer: c.MultiBuffer}
		if s.ZeroCopy() {
			info.Mode = "zero-copy"
		}
		// With one worker per socket, the worker of this queue builds in
		// place if its link is the socket itself; the debugging aids wrap
		// them, and copy.
		if d.group.Len() == len(sockets) {
			info.InPlace = d.group.Node(s.Queue()).TxInPlace()
		}
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
	if err != nil {
		return netip.Addr{}, [6]byte{}, err
	}
	var mac [6]byte
	copy(mac[:], nh.MAC)
	return nh.Src, mac, nil
}
