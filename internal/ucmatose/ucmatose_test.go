package ucmatose

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

var hostNet atomic.Uint32

// addrs returns a fresh server and client address for in-process devices.
func addrs() (server, client netip.Addr) {
	n := hostNet.Add(1)
	return netip.AddrFrom4([4]byte{198, 18, byte(160 + n), 1}), netip.AddrFrom4([4]byte{198, 18, byte(160 + n), 2})
}

// side is one end's output and result.
type side struct {
	out, err syncbuf.Buffer
	res      error
}

func (s *side) String() string { return s.out.String() + s.err.String() }

// runPair runs a ucmatose server and a client against it on in-process
// devices; srv and cli are their options (addresses filled in).
func runPair(t *testing.T, srv, cli Config) (server, client *side) {
	t.Helper()
	return runTool(t, func(ctx context.Context, sa netip.Addr, s *side) (tool, error) {
		srv.Provider, srv.Bind = fabric.ProviderMem, sa
		return Listen(ctx, srv, &s.out, &s.err)
	}, func(ctx context.Context, sa, ca netip.Addr, c *side) error {
		cli.Provider, cli.Server, cli.Bind = fabric.ProviderMem, sa, ca
		return Run(ctx, cli, &c.out, &c.err)
	})
}

// tool is a tool's server, listening.
type tool interface {
	Serve(context.Context) error
	Close()
}

// runTool runs a server (listen) and a client (run) against it on
// in-process devices with fresh addresses.
func runTool(t *testing.T, listen func(ctx context.Context, sa netip.Addr, s *side) (tool, error),
	run func(ctx context.Context, sa, ca netip.Addr, c *side) error) (server, client *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, ca := addrs()
	server, client = new(side), new(side)
	s, err := listen(ctx, sa, server)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.res = s.Serve(ctx)
	}()
	client.res = run(ctx, sa, ca, client)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the server did not end after its client; client %v\n%s", client.res, client)
	}
	return server, client
}

const (
	serverOut = "cmatose: starting server\n" +
		"initiating data transfers\n" +
		"completing sends\n" +
		"receiving data transfers\n" +
		"data transfers complete\n" +
		"cmatose: disconnecting\n" +
		"disconnected\n" +
		"test complete\n" +
		"return status 0\n"
	clientOut = "cmatose: starting client\n" +
		"cmatose: connecting\n" +
		"receiving data transfers\n" +
		"sending replies\n" +
		"data transfers complete\n" +
		"test complete\n" +
		"return status 0\n"
)

// TestUcmatose is `ucmatose` and `ucmatose -s SERVER` with cmatose's
// defaults and with several connections, counts and sizes: cmatose's
// output, line for line, at both ends, and nothing on stderr.
func TestUcmatose(t *testing.T) {
	for _, tc := range []struct{ conns, count, size, ack int }{
		{1, 10, 100, 0}, // cmatose's defaults
		{4, 25, 1000, 0},
		{8, 1, 16, 17},    // -a 17
		{2, 100, 9000, 0}, // several packets a message
		{1, MaxCount, 8, 0},
	} {
		cfg := Defaults()
		cfg.Connections, cfg.Count, cfg.Size, cfg.AckTimeout = tc.conns, tc.count, tc.size, tc.ack
		s, c := runPair(t, cfg, cfg)
		if s.res != nil || c.res != nil {
			t.Fatalf("%+v: server %v, client %v\nserver:\n%s\nclient:\n%s", tc, s.res, c.res, s, c)
		}
		if s.out.String() != serverOut || s.err.String() != "" {
			t.Errorf("%+v: server printed\n%s%s", tc, s.out.String(), s.err.String())
		}
		if c.out.String() != clientOut || c.err.String() != "" {
			t.Errorf("%+v: client printed\n%s%s", tc, c.out.String(), c.err.String())
		}
	}
}

// TestNoMessages: -S 0 (and -C 0) connect and disconnect only; -m says
// it migrates.
func TestNoMessages(t *testing.T) {
	for _, cfg := range []Config{{Connections: 3, Count: 10, Size: 0}, {Connections: 1, Count: 0, Size: 100, Migrate: true}} {
		s, c := runPair(t, cfg, cfg)
		if s.res != nil || c.res != nil {
			t.Fatalf("%+v: server %v, client %v\nserver:\n%s\nclient:\n%s", cfg, s.res, c.res, s, c)
		}
		mig := ""
		if cfg.Migrate {
			mig = "migrating to new event channel\n"
		}
		want := "cmatose: starting server\n" + mig + "cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
		if s.out.String() != want {
			t.Errorf("%+v: server printed\n%s", cfg, s.out.String())
		}
		want = "cmatose: starting client\ncmatose: connecting\n" + mig + "test complete\nreturn status 0\n"
		if c.out.String() != want {
			t.Errorf("%+v: client printed\n%s", cfg, c.out.String())
		}
	}
}

// TestTooManyClients: a server of one connection rejects the next
// client, as cmatose's connect_handler does when it has no node left.
func TestTooManyClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, ca := addrs()
	srv := Defaults()
	srv.Provider, srv.Bind, srv.Count = fabric.ProviderMem, sa, 2
	var sout, serr syncbuf.Buffer
	s, err := Listen(ctx, srv, &sout, &serr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	// The first client connects, and takes its messages; its replies
	// come only after a second client was turned away.
	cli := srv
	cli.Server, cli.Bind, cli.Connections = sa, ca, 2
	var out, errb syncbuf.Buffer
	err = Run(ctx, cli, &out, &errb)
	var ce *CMError
	if !errors.As(err, &ce) || ce.Event != "RDMA_CM_EVENT_REJECTED" || ce.Status != 8 {
		t.Fatalf("client of two connections to a server of one: %v\n%s%s", err, out.String(), errb.String())
	}
	if want := "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"; out.String() != want {
		t.Fatalf("client printed\n%s", out.String())
	}
	// The server saw its connection end early.
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the server did not end:\n%s", sout.String())
	}
	if err == nil || !strings.Contains(sout.String(), "cmatose: failing connection request\n") {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
}

// TestNoServer: a client of a port nobody listens on, on a host that
// is there, fails at once: REJECTED, error 8, as rxe reports it.
func TestNoServer(t *testing.T) {
	sa, ca := addrs()
	d, err := openDomain(context.Background(), fabric.ProviderMem, "", DefaultPort, sa, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	cfg := Defaults()
	cfg.Provider, cfg.Server, cfg.Bind = fabric.ProviderMem, sa, ca
	var out, errb syncbuf.Buffer
	err = Run(context.Background(), cfg, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "RDMA_CM_EVENT_REJECTED, error: 8: nobody listens at "+sa.String()+":7471") ||
		strings.Contains(err.Error(), "\n") {
		t.Fatalf("no server: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("no server: failed after %v", d)
	}
	want := "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"
	if out.String() != want || errb.String() != "" {
		t.Fatalf("no server printed %q %q", out.String(), errb.String())
	}
}

// TestNoHost: a client of an address nobody has.
func TestNoHost(t *testing.T) {
	sa, ca := addrs()
	cfg := Defaults()
	cfg.Provider, cfg.Server, cfg.Bind = fabric.ProviderMem, sa, ca
	var out, errb syncbuf.Buffer
	err := Run(context.Background(), cfg, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "RDMA_CM_EVENT_ADDR_ERROR") || !strings.Contains(out.String(), "return status -110\n") {
		t.Fatalf("no host: %v\n%s", err, out.String())
	}
}

func TestBadConfig(t *testing.T) {
	sa := netip.MustParseAddr("198.18.159.1")
	for _, cfg := range []Config{{Connections: -1}, {Count: -1, Size: 1}, {Count: MaxCount + 1, Size: 1}, {Size: -1},
		{Size: MaxSize + 1}, {AckTimeout: 32}} {
		cfg.Provider, cfg.Bind, cfg.Server = fabric.ProviderMem, sa, sa
		if _, err := Listen(context.Background(), cfg, nil, nil); err == nil {
			t.Errorf("Listen(%+v) did not fail", cfg)
		}
		if err := Run(context.Background(), cfg, nil, nil); err == nil {
			t.Errorf("Run(%+v) did not fail", cfg)
		}
	}
	if err := Run(context.Background(), Config{Provider: fabric.ProviderMem}, nil, nil); err == nil || !strings.Contains(err.Error(), "-s") {
		t.Errorf("a client without a server address: %v", err)
	}
}

// TestRDMAServerClient: rdma_server and rdma_client, their lines.
func TestRDMAServerClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, ca := addrs()
	var sout, serr, cout, cerr syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RDMAServer(ctx, RDMAConfig{Provider: fabric.ProviderMem, Addr: sa}, &sout, &serr)
	}()
	// rdma_server says nothing when it listens: try until it does.
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		cout, cerr = syncbuf.Buffer{}, syncbuf.Buffer{}
		err = RDMAClient(ctx, RDMAConfig{Provider: fabric.ProviderMem, Addr: sa, Source: ca}, &cout, &cerr)
		if err == nil || !errors.Is(err, fabric.ErrRejected) && !errors.Is(err, fabric.ErrAddrNotAvail) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || cout.String() != "rdma_client: start\nrdma_client: end 0\n" || cerr.String() != "" {
		t.Fatalf("client: %v\n%s%s", err, cout.String(), cerr.String())
	}
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end")
	}
	if err != nil || sout.String() != "rdma_server: start\nrdma_server: end 0\n" || serr.String() != "" {
		t.Fatalf("server: %v\n%s%s", err, sout.String(), serr.String())
	}
}

// TestRDMAClientNoServer: rdma_client of a port nobody listens on.
func TestRDMAClientNoServer(t *testing.T) {
	sa, ca := addrs()
	d, err := openDomain(context.Background(), fabric.ProviderMem, "", DefaultPort, sa, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var out, errb syncbuf.Buffer
	err = RDMAClient(context.Background(), RDMAConfig{Provider: fabric.ProviderMem, Addr: sa, Source: ca}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "rdma_connect: RDMA_CM_EVENT_REJECTED") || out.String() != "rdma_client: start\nrdma_client: end -1\n" {
		t.Fatalf("no server: %v\n%s", err, out.String())
	}
}
