package test

import (
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// startServer starts softfabric with args in h's namespace and returns
// its output and a channel that yields its exit status; the server is
// killed at the test's end if it still runs.
func startServer(t *testing.T, h *netnstest.Host, args ...string) (sout, serr *syncbuf.Buffer, done <-chan int) {
	t.Helper()
	srv := h.Command(sfBin, args...)
	sout, serr = new(syncbuf.Buffer), new(syncbuf.Buffer)
	srv.Stdout, srv.Stderr = sout, serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	codes := make(chan int, 1)
	go func() {
		_ = srv.Wait()
		codes <- srv.ProcessState.ExitCode()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = srv.Process.Kill()
			<-exited
		}
	})
	return sout, serr, codes
}

// waitListening waits up to 10 s for a listener on port in h's namespace:
// a passive endpoint listens on TCP too (fabric's seam), and the servers
// say nothing when they listen. A ucmatose client of several connections
// must not race the server's listen: connections that arrive before it
// are rejected, those after it accepted, and the server is left with
// connections whose client gave up, as cmatose's would be.
func waitListening(t *testing.T, h *netnstest.Host, port string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out, err := h.Command("ss", "-Hltn", "sport = :"+port).Output()
		if err != nil {
			t.Fatalf("ss: %v", err)
		}
		if len(strings.TrimSpace(string(out))) > 0 {
			// The TCP listener comes first, then the RDMA-CM
			// service's registration with the daemon.
			time.Sleep(200 * time.Millisecond)
			return
		}
	}
	t.Fatalf("nobody listens on port %s after 10 s", port)
}

// waitExit returns the exit status of a server startServer started,
// which should exit within 10 s (after its client did).
func waitExit(t *testing.T, done <-chan int, sout, serr *syncbuf.Buffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not exit after its client:\n%s%s", sout.String(), serr.String())
		return 0
	}
}

// TestUcmatose: `softfabric ucmatose -c 4 -C 50 -S 2000` in one
// namespace and `softfabric ucmatose -s SERVER` with the same options in
// the other, with softfabric's daemons: each prints what cmatose
// prints, line for line, and exits 0. Then a client of a port nobody
// listens on: REJECTED, error 8, exit status 1.
func TestUcmatose(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	server := p.B.Addr.Addr().String()
	opts := []string{"-c", "4", "-C", "50", "-S", "2000"}
	sout, serr, srvDone := startServer(t, p.B, append([]string{"ucmatose", "--iface", p.B.Iface}, opts...)...)
	waitListening(t, p.B, "7471")
	c := sfWithin(t, p.A, 60*time.Second, append([]string{"ucmatose", "-s", server, "--iface", p.A.Iface}, opts...)...)
	want := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if c.code != 0 || c.out != want || c.err != "" {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s\nserver:\n%s%s", c.code, c.out, c.err, sout.String(), serr.String())
	}
	code := waitExit(t, srvDone, sout, serr)
	want = "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	if code != 0 || sout.String() != want || serr.String() != "" {
		t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, sout.String(), serr.String())
	}

	// Nobody listens on the port.
	start := time.Now()
	r := sfWithin(t, p.A, 20*time.Second, "ucmatose", "-s", server, "-p", "7472", "--iface", p.A.Iface)
	if r.code != 1 || !strings.HasSuffix(r.out, "cmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n") ||
		strings.Count(r.err, "\n") != 1 || !strings.Contains(r.err, "nobody listens at "+server+":7472") || time.Since(start) > 5*time.Second {
		t.Fatalf("no server, after %v: %+v", time.Since(start), r)
	}
}

// TestRDMAServerClient: `softfabric rdma_server` and `softfabric
// rdma_client -s SERVER` between namespaces: their two lines each, exit 0.
func TestRDMAServerClient(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	server := p.B.Addr.Addr().String()
	sout, serr, srvDone := startServer(t, p.B, "rdma_server", "--iface", p.B.Iface, "--timeout", "60s")
	waitListening(t, p.B, "7471")
	c := sfWithin(t, p.A, 60*time.Second, "rdma_client", "-s", server, "--iface", p.A.Iface, "--timeout", "30s")
	if c.code != 0 || c.out != "rdma_client: start\nrdma_client: end 0\n" || c.err != "" {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s\nserver:\n%s%s", c.code, c.out, c.err, sout.String(), serr.String())
	}
	select {
	case code := <-srvDone:
		if code != 0 || sout.String() != "rdma_server: start\nrdma_server: end 0\n" || serr.String() != "" {
			t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, sout.String(), serr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not exit after its client:\n%s%s", sout.String(), serr.String())
	}
}
