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

// TestRingSlots: an application's rings on a daemon of few queues have
// 1024 slots; on one of many, fewer, down to 256, and their bytes stay
// near 32 MiB, where 64 queues of 1024 slots would take 545 MB.
func TestRingSlots(t *testing.T) {
	for _, c := range []struct{ queues, slotSize, want int }{
		{1, 4096, 1024}, {2, 4096, 1024}, {4, 4096, 512}, {8, 4096, 256}, {64, 4096, 256},
		{1, 9216 + 64, 1024}, {2, 9216 + 64, 512}, {4, 9216 + 64, 256}, {0, 4096, 1024},
	} {
		got := ringSlots(c.queues, c.slotSize)
		bytes := 2 * max(c.queues, 1) * got * (c.slotSize + 64)
		if got != c.want {
			t.Errorf("%d queues, %d-byte slots: %d slots (%d bytes of rings), want %d", c.queues, c.slotSize, got, bytes, c.want)
		}
		if got > minRingSlots && bytes > ringBudget {
			t.Errorf("%d queues, %d-byte slots: %d bytes of rings", c.queues, c.slotSize, bytes)
		}
	}
}
