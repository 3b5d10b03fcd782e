package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// pingpongPair runs `softfabric pingpong args...` as the server in B, then
// as the client in A against it, and returns both results.
func pingpongPair(t *testing.T, p *netnstest.Pair, args ...string) (client, server result) {
	t.Helper()
	srv := p.B.Command(sfBin, append([]string{"pingpong", "--iface", p.B.Iface}, args...)...)
	var sout, serr syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	client = sf(p.A, append(append([]string{"pingpong", "--iface", p.A.Iface}, args...), p.B.Addr.Addr().String())...)
	select {
	case err := <-done:
		server = result{sout.String(), serr.String(), srv.ProcessState.ExitCode()}
		if err != nil && server.code == 0 {
			server.code = -1
		}
	case <-time.After(30 * time.Second):
		_ = srv.Process.Kill()
		<-done
		t.Fatalf("the pingpong server did not finish; client: %+v; server: %s%s", client, sout.String(), serr.String())
	}
	return client, server
}

func checkPingPong(t *testing.T, what string, r result, bytes, iters int, qps int) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", what, r.code, r.out, r.err)
	}
	t.Logf("%s:\n%s%s", what, r.err, r.out)
	// Only the tools' two result lines on stdout.
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], fmt.Sprintf("%d bytes in ", bytes)) || !strings.HasSuffix(lines[0], " Mbit/sec") ||
		!strings.HasPrefix(lines[1], fmt.Sprintf("%d iters in ", iters)) || !strings.HasSuffix(lines[1], " usec/iter") {
		t.Fatalf("%s stdout: %q", what, r.out)
	}
	// Their address lines, one local and one remote per QP, on stderr.
	if n := strings.Count(r.err, "  local address:  LID 0x0000, QPN 0x"); n != qps {
		t.Fatalf("%s: %d local address lines, want %d:\n%s", what, n, qps, r.err)
	}
	if n := strings.Count(r.err, "  remote address: LID 0x0000, QPN 0x"); n != qps || !strings.Contains(r.err, "GID ::ffff:198.18.0.") {
		t.Fatalf("%s: %d remote address lines, want %d:\n%s", what, n, qps, r.err)
	}
}

// TestPingPongUD: `softfabric pingpong --ud` at both ends, between two
// namespaces: ibv_ud_pingpong's exchange and test over XDP/AF_XDP, at its
// default size (1024, the active MTU of a 1500-byte link) and, on a
// 9000-byte link, at 4096.
func TestPingPongUD(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	c, s := pingpongPair(t, p, "--ud", "-n", "500")
	checkPingPong(t, "client", c, 1024*500*2, 500, 1)
	checkPingPong(t, "server", s, 1024*500*2, 500, 1)
	if !strings.Contains(c.err, "PSN 0x") || !strings.Contains(c.err, ": GID ::ffff:198.18.0.1") {
		t.Fatalf("ud_pingpong's local line has a colon before the GID:\n%s", c.err)
	}

	// Larger than the port's MTU: refused before the exchange, as the tool
	// does.
	r := sf(p.A, "pingpong", "--iface", "eth0", "--ud", "-s", "2048", "198.18.0.2")
	if r.code != 1 || !strings.Contains(r.err, "larger than port MTU (1024)") {
		t.Fatalf("-s 2048 on a 1500-byte link: %+v", r)
	}
}

func TestPingPongUDJumbo(t *testing.T) {
	p := setup(t, netnstest.Options{MTU: 9000}, false)
	up(t, p.A, p.B)
	c, s := pingpongPair(t, p, "--ud", "-s", "4096", "-n", "300")
	checkPingPong(t, "client", c, 4096*300*2, 300, 1)
	checkPingPong(t, "server", s, 4096*300*2, 300, 1)
}

// TestPingPongSRQ: `softfabric pingpong --srq` at both ends: 256-message
// exchange, QPs sharing one SRQ, the tool's default 4096-byte messages over
// a 1024 path MTU.
func TestPingPongSRQ(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	c, s := pingpongPair(t, p, "--srq", "-n", "2000")
	checkPingPong(t, "client", c, 4096*2000*2, 2000, 16)
	checkPingPong(t, "server", s, 4096*2000*2, 2000, 16)

	c, s = pingpongPair(t, p, "--srq", "-q", "3", "-s", "100", "-m", "256", "-n", "500")
	checkPingPong(t, "client", c, 100*500*2, 500, 3)
	checkPingPong(t, "server", s, 100*500*2, 500, 3)
}

// TestPingPongModeFlags: bad combinations are one line and exit status
// 2; a mode on an interface that is not up fails with exit status 1.
func TestPingPongModeFlags(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--ud", "--srq"}, 2, "choose one"},
		{[]string{"-q", "4"}, 2, "-q is for --srq"},
		{[]string{"--srq", "-q", "256"}, 2, "-q 256"},
		{[]string{"--ud", "-s", "0"}, 2, "must be positive"},
		{[]string{"--ud", "-s", "8192"}, 2, "at most 4096"},
		{[]string{"--srq", "-m", "1500"}, 2, "-m 1500"},
		{[]string{"--srq", "198.18.0.2", "extra"}, 2, "at most one server"},
		{[]string{"--ud", "198.18.0.2"}, 1, "not up"},
	} {
		r := sf(p.A, append([]string{"pingpong", "--iface", "eth0"}, tc.args...)...)
		lines := strings.Count(strings.TrimRight(r.err, "\n"), "\n") + 1
		if r.code != tc.code || !strings.Contains(r.err, tc.msg) || lines != 1 || r.out != "" {
			t.Errorf("pingpong %v: exit %d, stderr %q, stdout %q; want exit %d and one line with %q", tc.args, r.code, r.err, r.out, tc.code, tc.msg)
		}
	}
}
