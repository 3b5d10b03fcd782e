package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/fabric"
)

// runPerftestCMPair runs our RDMA-CM client against our RDMA-CM server
// (perftest -R on both sides) over an in-memory link.
func runPerftestCMPair(t *testing.T, cfg PerftestConfig, faults memlink.Faults, port uint16) (PerftestOutcome, PerftestOutcome) {
	t.Helper()
	a, b := pair(t, faults)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type out struct {
		sv  PerftestOutcome
		err error
	}
	srv := make(chan out, 1)
	at := make(chan netip.AddrPort, 1)
	go func() {
		sv, err := ServePerftestCM(ctx, OnDevice(b), port, cfg, func(a netip.AddrPort) { at <- a })
		srv <- out{sv, err}
	}()
	var addr netip.AddrPort
	select {
	case addr = <-at:
	case s := <-srv:
		t.Fatalf("server: %v", s.err)
	}
	run, err := RunPerftestCM(ctx, OnDevice(a), fmt.Sprintf("127.0.0.1:%d", addr.Port()), cfg)
	if err != nil {
		cancel()
	}
	s := <-srv
	if err != nil || s.err != nil {
		t.Fatalf("client: %v; server: %v", err, s.err)
	}
	return run, s.sv
}

// TestPerftestCMClientServer: our -R client and server agree for every
// test, -q 1 and 4, with and without -a.
func TestPerftestCMClientServer(t *testing.T) {
	for i, ft := range ptTests() {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestCMPair(t, ft.config(), memlink.Faults{}, uint16(18700+i))
			checkPerftestPair(t, ft, run, sv)
		})
	}
}

// TestPerftestCMLossy: both roles of the RDMA-CM mode over a link that
// loses, reorders and duplicates frames (the CM's MADs included).
func TestPerftestCMLossy(t *testing.T) {
	faults := memlink.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02}
	for i, ft := range []fakeTest{
		{op: "write", size: 3000, iters: 100, qps: 2},
		{op: "read", size: 3000, iters: 100, qps: 2},
		{op: "send", size: 3000, iters: 100, qps: 2},
		{op: "atomic", size: 8, iters: 200, qps: 2},
	} {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestCMPair(t, ft.config(), faults, uint16(18750+i))
			checkPerftestPair(t, ft, run, sv)
		})
	}
}

// TestPerftestCMNoServer: a client whose server listens on another port
// is rejected (REJ, invalid service ID) and gives up after its retries.
func TestPerftestCMNoServer(t *testing.T) {
	a, b := pair(t, memlink.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := PerftestConfig{Op: "write", Size: 64, Iters: 5}
	listening := make(chan netip.AddrPort, 1)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = ServePerftestCM(sctx, OnDevice(b), 18798, cfg, func(a netip.AddrPort) { listening <- a })
	}()
	defer func() { stop(); <-done }()
	<-listening
	start := time.Now()
	_, err := RunPerftestCM(ctx, OnDevice(a), "127.0.0.1:18799", cfg)
	if err == nil || !strings.Contains(err.Error(), "RDMA-CM listener") || !errors.Is(err, fabric.ErrRejected) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}
