package ucmatose

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// runUDPair runs a udaddy server and a client against it on in-process
// devices.
func runUDPair(t *testing.T, srv, cli UDConfig) (server, client *side) {
	t.Helper()
	return runTool(t, func(ctx context.Context, sa netip.Addr, s *side) (tool, error) {
		srv.Provider, srv.Bind = fabric.ProviderMem, sa
		return ListenUD(ctx, srv, &s.out, &s.err)
	}, func(ctx context.Context, sa, ca netip.Addr, c *side) error {
		cli.Provider, cli.Server, cli.Bind = fabric.ProviderMem, sa, ca
		return RunUD(ctx, cli, &c.out, &c.err)
	})
}

const (
	udServerOut = "udaddy: starting server\n" +
		"receiving data transfers\n" +
		"sending replies\n" +
		"data transfers complete\n" +
		"test complete\n" +
		"return status 0\n"
	udClientOut = "udaddy: starting client\n" +
		"udaddy: connecting\n" +
		"initiating data transfers\n" +
		"receiving data transfers\n" +
		"data transfers complete\n" +
		"test complete\n" +
		"return status 0\n"
)

// TestUdaddy is `udaddy` and `udaddy -s SERVER` with udaddy's defaults
// and with several connections, counts and sizes: udaddy's output, line
// for line, at both ends.
func TestUdaddy(t *testing.T) {
	for _, tc := range []struct{ conns, count, size int }{
		{1, 10, 100}, // udaddy's defaults
		{4, 25, 1000},
		{3, 0, 100}, // resolution only
	} {
		cfg := UDDefaults()
		cfg.Connections, cfg.Count, cfg.Size = tc.conns, tc.count, tc.size
		s, c := runUDPair(t, cfg, cfg)
		if s.res != nil || c.res != nil {
			t.Fatalf("%+v: server %v, client %v\nserver:\n%s\nclient:\n%s", tc, s.res, c.res, s, c)
		}
		sw, cw := udServerOut, udClientOut
		if tc.count == 0 {
			sw, cw = "udaddy: starting server\ntest complete\nreturn status 0\n", "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"
		}
		if s.String() != sw || c.String() != cw {
			t.Errorf("%+v: server printed\n%s\nclient printed\n%s", tc, s, c)
		}
	}
}

// TestUdaddyErrors: nobody listens on the port: the client reports
// UNREACHABLE, -ECONNREFUSED, as udaddy does; a message larger than the
// MTU is refused before anything is sent.
func TestUdaddyErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, ca := addrs()
	srv := UDDefaults()
	srv.Provider, srv.Bind, srv.Port = fabric.ProviderMem, sa, 7000
	var so side
	s, err := ListenUD(ctx, srv, &so.out, &so.err)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cli := UDDefaults()
	cli.Provider, cli.Server, cli.Bind = fabric.ProviderMem, sa, ca
	var c side
	err = RunUD(ctx, cli, &c.out, &c.err)
	var ce *CMError
	if !errors.As(err, &ce) || ce.Event != "RDMA_CM_EVENT_UNREACHABLE" || ce.Status != -int(syscall.ECONNREFUSED) ||
		!errors.Is(err, fabric.ErrRejected) {
		t.Fatalf("no listener: %v", err)
	}
	want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: -111\ntest complete\nreturn status -111\n"
	if c.String() != want {
		t.Errorf("client printed\n%s", c.String())
	}
	cli.Port, cli.Size = 7000, 1<<20
	var c2 side
	if err := RunUD(ctx, cli, &c2.out, &c2.err); err == nil || !strings.Contains(err.Error(), "larger than active mtu") {
		t.Errorf("large message: %v", err)
	}
}
