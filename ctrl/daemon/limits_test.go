package daemon

import (
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
)

// TestConnectTo: a queue pair's peers, as connect adds them: each once,
// the latest last, at most maxQPPeers (the oldest go).
func TestConnectTo(t *testing.T) {
	peer := func(i int) peerKey {
		return peerKey{netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), uint32(0x100 + i)}
	}
	var ks []peerKey
	for i := range 3 {
		ks = connectTo(ks, peer(i))
	}
	ks = connectTo(ks, peer(0)) // again: now the latest, once
	if len(ks) != 3 || ks[0] != peer(1) || ks[2] != peer(0) {
		t.Fatalf("after connecting 0, 1, 2, 0: %v", ks)
	}
	for i := 3; i < 100; i++ {
		ks = connectTo(ks, peer(i))
	}
	if len(ks) != maxQPPeers || ks[0] != peer(100-maxQPPeers) || ks[maxQPPeers-1] != peer(99) {
		t.Fatalf("after 100 peers: %d kept, %v", len(ks), ks)
	}
}

// TestAppQPLimit: an application that holds maxAppQPs queue pair numbers
// is refused one more, with an error that says why, before the daemon
// touches the classifier.
func TestAppQPLimit(t *testing.T) {
	d := &Daemon{owner: make([]atomic.Pointer[app], engine.MaxQPN)}
	a := &app{qps: map[uint32]struct{}{}}
	for q := range uint32(maxAppQPs) {
		a.qps[0x100+q] = struct{}{}
	}
	err := d.qpOp(a, daemonapi.Request{Op: daemonapi.OpSetQP, QPN: 0x100 + maxAppQPs})
	if !errors.Is(err, daemonapi.ErrInvalid) || !strings.Contains(err.Error(), "the most it may") {
		t.Fatalf("a queue pair number past the limit: %v", err)
	}
}
