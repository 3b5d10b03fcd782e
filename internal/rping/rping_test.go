package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// The characters rping's data rotates through: 'A' to 'z'.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz"

// wantData is ping n's data as rping prints it (without the NUL).
func wantData(n, size int) string {
	s := fmt.Sprintf("rdma-ping-%d: ", n)
	for i := 0; len(s) < size-1; i++ {
		s += string(alphabet[(n+i)%len(alphabet)])
	}
	return s
}

func TestFill(t *testing.T) {
	// rping 44.0 on rxe printed these (-C 3 -v, and -S 23).
	for _, tc := range []struct {
		n, size int
		want    string
	}{
		{0, 64, "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"},
		{1, 64, "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"},
		{2, 64, "rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst"},
		{0, 23, "rdma-ping-0: ABCDEFGHI"},
		{57, 30, "rdma-ping-57: zABCDEFGHIJKLMN"},
		{58, 30, "rdma-ping-58: ABCDEFGHIJKLMNO"},
		{1000000000, 23, "rdma-ping-1000000000: "},
	} {
		b := bytes.Repeat([]byte{0xee}, tc.size)
		fill(b, tc.n)
		if b[tc.size-1] != 0 || string(b[:tc.size-1]) != tc.want || tc.want != wantData(tc.n, tc.size) {
			t.Errorf("ping %d size %d: %q, want %q", tc.n, tc.size, b, tc.want)
		}
	}
}

func TestInfoWire(t *testing.T) {
	b := make([]byte, infoSize)
	info{addr: 0x0102030405060708, rkey: 0x0a0b0c0d, size: 64}.put(b)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 64}
	if !bytes.Equal(b, want) {
		t.Fatalf("rping_rdma_info % x, want % x", b, want)
	}
	if in := parseInfo(b); in != (info{0x0102030405060708, 0x0a0b0c0d, 64}) {
		t.Fatalf("parsed %+v", in)
	}
}

var hostNet atomic.Uint32

// addrs returns a fresh server and client address for in-process devices.
func addrs() (server, client netip.Addr) {
	n := hostNet.Add(1)
	return netip.AddrFrom4([4]byte{198, 18, byte(220 + n), 1}), netip.AddrFrom4([4]byte{198, 18, byte(220 + n), 2})
}

// side is one end's output and result.
type side struct {
	out, err syncbuf.Buffer
	res      error
}

// runPair runs an rping server and a client against it on in-process
// devices; cli and srv are their options (addresses filled in).
func runPair(t *testing.T, srv, cli Config) (server, client *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, ca := addrs()
	srv.Provider, srv.Addr = fabric.ProviderMem, sa
	cli.Provider, cli.Addr, cli.Source = fabric.ProviderMem, sa, ca
	server, client = new(side), new(side)
	s, err := Listen(ctx, srv, &server.out, &server.err)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.res = s.Serve(ctx)
	}()
	client.res = Ping(ctx, cli, &client.out, &client.err)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not end after its client; client %v\n%s%s", client.res, client.out.String(), client.err.String())
	}
	return server, client
}

func lines(prefix string, n, size int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%s\n", prefix, wantData(i, size))
	}
	return b.String()
}

// TestPing is `rping -s -v` and `rping -c -a SERVER -C 10 -V -v`: rping's
// output, line for line, at both ends.
func TestPing(t *testing.T) {
	s, c := runPair(t, Config{Verbose: true, Count: 10}, Config{Count: 10, Verbose: true, Validate: true})
	if c.res != nil || s.res != nil {
		t.Fatalf("client: %v, server: %v\n%s%s%s%s", c.res, s.res, c.out.String(), c.err.String(), s.out.String(), s.err.String())
	}
	if got, want := c.out.String(), lines("ping data: ", 10, DefaultSize); got != want {
		t.Errorf("client stdout:\n%s\nwant\n%s", got, want)
	}
	if got := c.err.String(); got != "client DISCONNECT EVENT...\n" {
		t.Errorf("client stderr: %q", got)
	}
	if got, want := s.out.String(), lines("server ping data: ", 10, DefaultSize); got != want {
		t.Errorf("server stdout:\n%s\nwant\n%s", got, want)
	}
	if got := s.err.String(); got != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
		t.Errorf("server stderr: %q", got)
	}
}

// TestPingQuietSizes: without -v nothing on stdout; the smallest and
// largest sizes; a server larger than its client (as rping allows).
func TestPingQuietSizes(t *testing.T) {
	for _, tc := range []struct{ srv, cli int }{{MinSize, MinSize}, {MaxSize, MaxSize}, {100, 23}} {
		s, c := runPair(t, Config{Size: tc.srv}, Config{Size: tc.cli, Count: 3, Validate: true})
		if c.res != nil || s.res != nil || c.out.String() != "" || s.out.String() != "" {
			t.Fatalf("-S %d/%d: client %v %q %q, server %v %q %q", tc.srv, tc.cli, c.res, c.out.String(), c.err.String(),
				s.res, s.out.String(), s.err.String())
		}
	}
}

// TestPingDebug: -d prints rping's debug lines, with the infos' fields.
func TestPingDebug(t *testing.T) {
	s, c := runPair(t, Config{Debug: true}, Config{Count: 2, Debug: true})
	if c.res != nil || s.res != nil {
		t.Fatalf("client %v, server %v", c.res, s.res)
	}
	for _, want := range []string{"rdma_connect successful\n", "RDMA addr ", " len 64\n", "recv completion\n", "send completion\n"} {
		if !strings.Contains(c.out.String(), want) {
			t.Errorf("client -d output lacks %q:\n%s", want, c.out.String())
		}
	}
	for _, want := range []string{"rdma_listen\n", "accepting client connection request\n", "Received rkey ", "server posted rdma read req \n",
		"rdma read completion\n", "server posted go ahead\n", "rdma write from lkey ", "server rdma write complete \n"} {
		if !strings.Contains(s.out.String(), want) {
			t.Errorf("server -d output lacks %q:\n%s", want, s.out.String())
		}
	}
}

// TestServerSmallerThanClient: the server's buffer cannot take the
// client's data: the server says so, and its client sees it disconnect.
func TestServerSmallerThanClient(t *testing.T) {
	s, c := runPair(t, Config{Size: 30}, Config{Size: 64, Count: 5})
	if s.res == nil || !strings.Contains(s.res.Error(), "the client's ping data is 64 bytes, more than this server's 30") {
		t.Fatalf("server: %v", s.res)
	}
	if c.res != nil || c.err.String() != "client DISCONNECT EVENT...\nwait for RDMA_WRITE_ADV state 10\n" {
		t.Fatalf("client: %v %q", c.res, c.err.String())
	}
}

// TestNoServer: a client of a port nobody listens on, on a host that
// is there, fails at once, in one line: the host's connection manager
// rejects the request.
func TestNoServer(t *testing.T) {
	sa, ca := addrs()
	d, err := openDomain(context.Background(), Config{Provider: fabric.ProviderMem}, sa)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	var out, errb syncbuf.Buffer
	err = Ping(context.Background(), Config{Provider: fabric.ProviderMem, Addr: sa, Source: ca, Count: 1}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "RDMA_CM_EVENT_REJECTED: no rping server at "+sa.String()+":7174") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("no server: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("no server: failed after %v", d)
	}
	if out.String() != "" || errb.String() != "" {
		t.Fatalf("no server printed %q %q", out.String(), errb.String())
	}
}

// TestNoHost: a client of an address nobody has fails at once.
func TestNoHost(t *testing.T) {
	sa, ca := addrs()
	var out, errb syncbuf.Buffer
	err := Ping(context.Background(), Config{Provider: fabric.ProviderMem, Addr: sa, Source: ca, Count: 1}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "RDMA_CM_EVENT_ADDR_ERROR: nobody answers for "+sa.String()) {
		t.Fatalf("no host: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Size: MinSize - 1}, {Size: MaxSize + 1}, {Count: -1}} {
		cfg.Provider, cfg.Addr = fabric.ProviderMem, netip.MustParseAddr("198.18.219.1")
		if _, err := Listen(context.Background(), cfg, nil, nil); err == nil {
			t.Errorf("Listen(%+v) did not fail", cfg)
		}
		if err := Ping(context.Background(), cfg, nil, nil); err == nil {
			t.Errorf("Ping(%+v) did not fail", cfg)
		}
	}
	if err := Ping(context.Background(), Config{Provider: fabric.ProviderMem}, nil, nil); err == nil || !strings.Contains(err.Error(), "-a") {
		t.Errorf("a client without a server address: %v", err)
	}
}

// TestPersistent: -P serves clients at once, and the next ones, until its
// context ends.
func TestPersistent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sa, _ := addrs()
	var sout, serr syncbuf.Buffer
	s, err := Listen(ctx, Config{Provider: fabric.ProviderMem, Addr: sa, Persistent: true, Verbose: true}, &sout, &serr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Serve(sctx) }()
	for round := range 2 {
		var wg sync.WaitGroup
		for range 3 {
			_, ca := addrs()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out, errb syncbuf.Buffer
				cfg := Config{Provider: fabric.ProviderMem, Addr: sa, Source: ca, Count: 5, Validate: true, Verbose: true}
				if err := Ping(ctx, cfg, &out, &errb); err != nil || out.String() != lines("ping data: ", 5, DefaultSize) {
					t.Errorf("round %d: client %v:\n%s%s", round, err, out.String(), errb.String())
				}
			}()
		}
		wg.Wait()
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve: %v", err)
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-4: "); n != 6 {
		t.Fatalf("the server saw %d clients' last pings, want 6:\n%s", n, sout.String())
	}
	if n := strings.Count(serr.String(), "server DISCONNECT EVENT...\n"); n != 6 {
		t.Fatalf("%d disconnects:\n%s", n, serr.String())
	}
}
