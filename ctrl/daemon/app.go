package daemon

import (
	"net"
	"net/netip"
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

	// peers are the RC peers its queue pairs are connected to: what it
	// may send RC packets to. Copy on write; read by the workers.
	peers atomic.Pointer[map[peerKey]struct{}]
	// qps and conns are its QPNs and each one's peers (Daemon.mu).
	qps   map[uint32]struct{}
	conns map[uint32][]peerKey

	st  []appCounters // by queue, each written by its worker
	bad atomic.Bool   // its rings were found corrupt, and it is being detached

	transport atomic.Pointer[daemonapi.Transport] // its last report
}

type peerKey struct {
	gid netip.Addr
	qpn uint32
}

// appCounters are one worker's counts for one application, on a cache
// line of their own.
type appCounters struct {
	rx, tx, denied, dropped atomic.Uint64
	_                       [32]byte
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

// release unmaps a's rings, once no worker holds it (Region.Close is
// idempotent, and a closed region's ends still answer Stats).
func (a *app) release() {
	for _, r := range a.regions {
		_ = r.Close()
	}
}
