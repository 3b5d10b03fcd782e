package test

import (
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// waitAttached waits up to 10 s for an application to attach to h's
// daemon, and a little more: a udaddy server listens by SIDR alone, on
// no TCP port, and says nothing when it does; its listen follows its
// attach at once (the daemon's status does not show QP1 or services).
func waitAttached(t *testing.T, h *netnstest.Host) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(daemonAppStats(t, h)) > 0 {
			time.Sleep(500 * time.Millisecond)
			return
		}
	}
	t.Fatal("no application attached after 10 s")
}

// TestUdaddy: `softfabric udaddy -c 3 -C 40 -S 1000` in one namespace and
// `softfabric udaddy -s SERVER` with the same options in the other,
// through softfabric's daemons (the SIDR_REQ routed to the listener by
// its service, the SIDR_REP back by its request ID): each prints what
// udaddy prints, line for line, and exits 0. Then a client of a port
// nobody listens on: UNREACHABLE, -ECONNREFUSED, at once.
func TestUdaddy(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	server := p.B.Addr.Addr().String()
	opts := []string{"-c", "3", "-C", "40", "-S", "1000"}
	sout, serr, srvDone := startServer(t, p.B, append([]string{"udaddy", "--iface", p.B.Iface}, opts...)...)
	waitAttached(t, p.B)
	c := sfWithin(t, p.A, 60*time.Second, append([]string{"udaddy", "-s", server, "--iface", p.A.Iface}, opts...)...)
	want := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if c.code != 0 || c.out != want || c.err != "" {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s\nserver:\n%s%s", c.code, c.out, c.err, sout.String(), serr.String())
	}
	code := waitExit(t, srvDone, sout, serr)
	want = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if code != 0 || sout.String() != want || serr.String() != "" {
		t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, sout.String(), serr.String())
	}

	// Nobody listens on the port (nor, now, speaks RDMA-CM there: the
	// daemon answers itself).
	start := time.Now()
	r := sfWithin(t, p.A, 20*time.Second, "udaddy", "-s", server, "--port", "7175", "--iface", p.A.Iface)
	if r.code != 1 || !strings.HasSuffix(r.out, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: -111\ntest complete\nreturn status -111\n") ||
		strings.Count(r.err, "\n") != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("no server, after %v: %+v", time.Since(start), r)
	}
}
