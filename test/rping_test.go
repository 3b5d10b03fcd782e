package test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// sfWithin runs softfabric in h's namespace and kills it if it runs
// longer than d (code -1 then).
func sfWithin(t *testing.T, h *netnstest.Host, d time.Duration, args ...string) result {
	t.Helper()
	cmd := h.Command(sfBin, args...)
	var out, errb syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return result{out.String(), errb.String(), -1}
	}
}

// daemonCMRejects is how many RDMA-CM requests h's daemon rejected
// itself, as `status --json` shows them.
func daemonCMRejects(t *testing.T, h *netnstest.Host) uint64 {
	t.Helper()
	n := uint64(0)
	for _, w := range daemonStats(t, h).Workers {
		n += w.CMRejects
	}
	return n
}

// rpingData is rping's line for ping n at its default size (64): the
// ping's number, then 50 of the characters 'A' to 'z', rotating.
func rpingData(prefix string, n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz"
	s := fmt.Sprintf("rdma-ping-%d: ", n)
	for i := 0; len(s) < 63; i++ {
		s += string(alphabet[(n+i)%len(alphabet)])
	}
	return prefix + s + "\n"
}

// TestRping: `softfabric rping -s -v` in one namespace, `softfabric rping
// -c -a SERVER -C 20 -V -v` in the other, with softfabric's daemons: each
// side prints what rping prints, line for line, and exits 0. Then a
// client of a port nobody listens on, and of an address nobody has: one
// line, exit status 1, in bounded time.
func TestRping(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	server := p.B.Addr.Addr().String()

	srv := p.B.Command(sfBin, "rping", "-s", "-v", "--iface", p.B.Iface)
	var sout, serr syncbuf.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	t.Cleanup(func() {
		if srv.ProcessState == nil {
			_ = srv.Process.Kill()
			<-srvDone
		}
	})

	// rping's server says nothing when it listens: the client tries
	// again while nobody does, as a user would.
	var c result
	for deadline := time.Now().Add(10 * time.Second); ; {
		c = sfWithin(t, p.A, 30*time.Second, "rping", "-c", "-a", server, "-C", "20", "-V", "-v", "--iface", p.A.Iface)
		if c.code == 0 || !strings.Contains(c.err, "RDMA_CM_EVENT_REJECTED") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var want strings.Builder
	for n := range 20 {
		want.WriteString(rpingData("ping data: ", n))
	}
	if c.code != 0 || c.out != want.String() || c.err != "client DISCONNECT EVENT...\n" {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s\nserver:\n%s%s", c.code, c.out, c.err, sout.String(), serr.String())
	}
	select {
	case <-srvDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("the server did not exit after its client:\n%s%s", sout.String(), serr.String())
	}
	want.Reset()
	for n := range 20 {
		want.WriteString(rpingData("server ping data: ", n))
	}
	if code := srv.ProcessState.ExitCode(); code != 0 || sout.String() != want.String() ||
		serr.String() != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
		t.Fatalf("server: exit %d\nstdout:\n%s\nstderr:\n%s", code, sout.String(), serr.String())
	}

	// Nobody listens on the port.
	start := time.Now()
	r := sfWithin(t, p.A, 20*time.Second, "rping", "-c", "-a", server, "-p", "7175", "-C", "1", "--iface", p.A.Iface)
	if r.code != 1 || r.out != "" || strings.Count(r.err, "\n") != 1 ||
		!strings.Contains(r.err, "RDMA_CM_EVENT_REJECTED: no rping server at "+server+":7175") || time.Since(start) > 5*time.Second {
		t.Fatalf("no server, after %v: %+v", time.Since(start), r)
	}
	// With no application of its own speaking RDMA-CM, B's daemon itself
	// rejected the request.
	if n := daemonCMRejects(t, p.B); n < 1 {
		t.Errorf("B's daemon counts %d rejected requests, want at least 1", n)
	}
	// Nobody has the address.
	start = time.Now()
	r = sfWithin(t, p.A, 20*time.Second, "rping", "-c", "-a", "198.18.0.99", "-C", "1", "--timeout", "2s", "--iface", p.A.Iface)
	if r.code != 1 || r.out != "" || strings.Count(r.err, "\n") != 1 || !strings.Contains(r.err, "198.18.0.99:7174") ||
		time.Since(start) > 6*time.Second {
		t.Fatalf("no host, after %v: %+v", time.Since(start), r)
	}
	t.Logf("no host: %s", r.err)
}

// TestRpingUnderLoss: both sides lose a tenth of what they send (the
// connection manager's MADs included: REQ, REP, RTU, DREQ, DREP are sent
// again on their timeouts) and duplicate some, through their daemons; 10
// pings still complete, each checked. (At a fifth, both DREQs that the
// client's then 2 s Shutdown sent were lost one run in 25, and rping's
// server, as Linux's, waits for the disconnect for ever: Shutdown now
// waits for three, and a tenth makes the three all lost one run in 1000.)
func TestRpingUnderLoss(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	faults := "SOFTFABRIC_DEBUG_LINK_FAULTS=loss=10%,dup=5%"
	srv := p.B.Command(sfBin, "rping", "-s", "--iface", p.B.Iface)
	srv.Env = append(os.Environ(), faults)
	var serr syncbuf.Buffer
	srv.Stderr = &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	t.Cleanup(func() {
		if srv.ProcessState == nil {
			_ = srv.Process.Kill()
			<-srvDone
		}
	})
	var out, errb string
	code := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		cli := p.A.Command(sfBin, "rping", "-c", "-a", p.B.Addr.Addr().String(), "-C", "10", "-V", "--timeout", "30s", "--iface", p.A.Iface)
		cli.Env = append(os.Environ(), faults)
		var o, e syncbuf.Buffer
		cli.Stdout, cli.Stderr = &o, &e
		err := cli.Run()
		out, errb, code = o.String(), e.String(), cli.ProcessState.ExitCode()
		if err == nil || !strings.Contains(errb, "RDMA_CM_EVENT_REJECTED") {
			break // rejected: the server was not listening yet
		}
	}
	if code != 0 || errb != "client DISCONNECT EVENT...\n" {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s\nserver:\n%s", code, out, errb, serr.String())
	}
	select {
	case err := <-srvDone:
		if err != nil {
			t.Fatalf("server: %v\n%s", err, serr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("server did not finish:\n%s", serr.String())
	}
}
