package daemon

import (
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/link/shmlink"
)

// app is an attached application.
type app struct {
	id    uint32
	pid   int
	uid   int
	name  string
	since time.Time
	conn  *net.UnixConn

	regions []*shmlink.Region // by queue
	ends    []*shmlink.End    // the daemon's ends, by queue

	// qps and conns are its QPNs and each one's peers (Daemon.mu).
	qps   map[uint32]struct{}
	conns map[uint32][]peerKey
	// peers is the set of conns' peers (publishPeers): what it may send
	// RC packets to. Copy on write; read by the workers.
	peers atomic.Pointer[map[peerKey]struct{}]
	// qpPeers is a copy of conns (publishPeers), for the workers: whom a
	// queue pair of it is connected to.
	qpPeers atomic.Pointer[map[uint32][]peerKey]

	st  []appCounters // by queue, each written by its worker
	bad atomic.Bool   // its rings were found corrupt, and it is being detached

	transport atomic.Pointer[daemonapi.Transport] // its last report

	// mem is the memory the application shares with the daemon
	// (daemonapi.OpAddMemory), by its region ID, as the daemon maps it:
	// where the workers place the payloads of frames it announced
	// (shmlink expectations). Copy on write; read by the workers.
	mem atomic.Pointer[map[uint32][]byte]
}

type peerKey struct {
	gid netip.Addr
	qpn uint32
}

// publishPeers makes the workers see the peers of a.conns (Daemon.mu
// held).
func (a *app) publishPeers() {
	peers := map[peerKey]struct{}{}
	qpPeers := make(map[uint32][]peerKey, len(a.conns))
	for qpn, ks := range a.conns {
		for _, k := range ks {
			peers[k] = struct{}{}
		}
		qpPeers[qpn] = slices.Clone(ks)
	}
	a.peers.Store(&peers)
	a.qpPeers.Store(&qpPeers)
}

// connectedTo reports whether a's queue pair qpn is connected to a queue
// pair of application b on this device (at one of its addresses srcs),
// as owner says who owns which. A nil a (qpn is nobody's) is connected to
// anything: the frame is dropped as unknown when delivered.
func (a *app) connectedTo(qpn uint32, b *app, srcs []netip.Addr, owner []atomic.Pointer[app]) bool {
	if a == nil {
		return true
	}
	m := a.qpPeers.Load()
	if m == nil {
		return false
	}
	for _, k := range (*m)[qpn] {
		if k.qpn < uint32(len(owner)) && owner[k.qpn].Load() == b && slices.Contains(srcs, k.gid) {
			return true
		}
	}
	return false
}

// appCounters are one worker's counts for one application, on a cache
// line of their own; newRx and newPlaced (the worker's alone) count the
// frames delivered to its ring in the worker's current pass, published
// and added to rx and placed at the end of it (publish): an atomic add
// between a frame's copy and its sequence word would make the word wait
// for the copy to reach the cache.
type appCounters struct {
	rx, tx, denied, dropped atomic.Uint64
	// expects and badExpects count the expectations it announced that
	// the worker took and refused; placed the frames whose payload the
	// worker placed (place.go), gathered those it sent whose payload it
	// took from the application's memory.
	expects, badExpects, placed, gathered atomic.Uint64
	newRx, newPlaced                      uint64
	park                                  parked // frames for the full ring (park.go)
	_                                     [64]byte
}

// corrupt reports whether a worker found one of a's rings corrupt (the
// ends count it; they are safe to read from any goroutine).
func (a *app) corrupt() bool {
	for _, e := range a.ends {
		if e.Stats().BadDescriptors > 0 {
			return true
		}
	}
	return false
}

// release unmaps a's rings and the memory it shared, once no worker holds
// it (Region.Close is idempotent, and a closed region's ends still answer
// Stats; releaseMemory too).
func (a *app) release() {
	for _, r := range a.regions {
		_ = r.Close()
	}
	a.releaseMemory()
}
