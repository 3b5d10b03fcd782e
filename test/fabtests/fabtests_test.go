package fabtests

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/internal/netnstest"
)

const (
	roleEnv = "SOFTFABRIC_FABTEST"
	selfEnv = "SOFTFABRIC_FABTEST_SELF"
	peerEnv = "SOFTFABRIC_FABTEST_PEER"
)

// pairUp makes two namespaces on a plain veth and brings softfabric up on
// both.
func pairUp(t *testing.T) *netnstest.Pair {
	t.Helper()
	netnstest.Require(t)
	if err := ctrl.EnsureBPFFS(); err != nil {
		t.Fatal(err)
	}
	p := netnstest.NewPair(t, netnstest.Options{})
	for _, h := range []*netnstest.Host{p.A, p.B} {
		if out, err := h.Exec(sfBin, "up", h.Iface); err != nil {
			t.Fatalf("up: %v\n%s", err, out)
		}
		t.Cleanup(func() { _, _ = h.Exec(sfBin, "down", h.Iface) })
	}
	return p
}

// run runs scenario between the namespaces: its server role in B, then,
// once the server says it is ready, its client role in A.
func run(t *testing.T, p *netnstest.Pair, scenario string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.A.Addr.Addr().String(), p.B.Addr.Addr().String()
	srv := p.B.Command(self, "-test.run=^$")
	srv.Env = append(os.Environ(), roleEnv+"="+scenario+"-server", selfEnv+"="+b, peerEnv+"="+a)
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var srvWaitErr error
	done := make(chan struct{})
	go func() { srvWaitErr = srv.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
		}
	}()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("server did not start:\n%s", srvErr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("server not ready in 20 s:\n%s", srvErr.String())
	}
	cli := p.A.Command(self, "-test.run=^$")
	cli.Env = append(os.Environ(), roleEnv+"="+scenario+"-client", selfEnv+"="+a, peerEnv+"="+b)
	cout, cerr := cli.CombinedOutput()
	if cerr != nil {
		t.Errorf("client: %v\n%s", cerr, cout)
	}
	select {
	case <-done:
		if srvWaitErr != nil {
			t.Errorf("server: %v\n%s", srvWaitErr, srvErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("server did not finish:\n%s", srvErr.String())
	}
}

// TestFabtestsNamespaces runs fi_msg (with RMA and native atomics), fi_rdm
// (tagged, unexpected messages, software atomics), fi_dgram and the RDM
// suite (cq_data, inject_test, unexpected_msg, rdm_tagged_peek,
// recv_cancel, multi_recv, multi_mr, av_xfer, flood, rdm_atomic -o all)
// between two namespaces.
func TestFabtestsNamespaces(t *testing.T) {
	p := pairUp(t)
	for _, s := range []string{"msg", "rdm", "dgram", "suite"} {
		t.Run(s, func(t *testing.T) { run(t, p, s) })
	}
}

// TestHello runs the README's program (examples/hello) between two
// namespaces: the receiver prints the message.
func TestHello(t *testing.T) {
	p := pairUp(t)
	bin := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/hello").CombinedOutput(); err != nil {
		t.Fatalf("building hello: %v\n%s", err, out)
	}
	a, b := p.A.Addr.Addr().String(), p.B.Addr.Addr().String()
	recv := p.B.Command(bin, b)
	var out bytes.Buffer
	recv.Stdout, recv.Stderr = &out, &out
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- recv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	if sent, err := p.A.Exec(bin, a, b); err != nil || !strings.Contains(sent, "send|msg") {
		t.Errorf("sender: %v: %s", err, sent)
	}
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), `recv|msg "hello over RDMA"`) {
			t.Errorf("receiver: %v: %s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		_ = recv.Process.Kill()
		t.Errorf("receiver did not finish: %s", out.String())
	}
}
