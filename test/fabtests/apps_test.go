package fabtests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/softfabric/softfabric/ctrl"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// proc is a role running in a namespace, its output watched line by line.
type proc struct {
	name   string
	cmd    *netnstest.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	lines  []string
	seen   chan string
	done   chan struct{}
	err    error
	stderr bytes.Buffer
}

// startRole starts this test binary in h as role, with extra environment.
func startRole(t *testing.T, h *netnstest.Host, role, self, peer string, env ...string) *proc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: fmt.Sprintf("%s[%s]", role, strings.Join(env, " ")), cmd: h.Command(bin, "-test.run=^$"),
		seen: make(chan string, 64), done: make(chan struct{})}
	p.cmd.Env = append(append(os.Environ(), roleEnv+"="+role, selfEnv+"="+self, peerEnv+"="+peer), env...)
	p.cmd.Stderr = &syncWriter{w: &p.stderr, mu: &p.mu}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// waitLine waits for a line starting with prefix.
func (p *proc) waitLine(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.seen:
		case <-p.done:
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, l := range p.lines {
				if strings.HasPrefix(l, prefix) {
					return l
				}
			}
			t.Fatalf("%s exited (%v) without %q:\n%s\n%s", p.name, p.err, prefix, strings.Join(p.lines, "\n"), p.stderr.String())
		case <-deadline:
			p.mu.Lock()
			defer p.mu.Unlock()
			t.Fatalf("%s: no %q in %v:\n%s\n%s", p.name, prefix, timeout, strings.Join(p.lines, "\n"), p.stderr.String())
		}
	}
}

// wait waits for the process to exit and returns its error.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.mu.Lock()
		defer p.mu.Unlock()
		t.Fatalf("%s did not exit in %v:\n%s\n%s", p.name, timeout, strings.Join(p.lines, "\n"), p.stderr.String())
		return nil
	}
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n") + "\n" + p.stderr.String()
}

// daemonLog is what h's daemon wrote to its log.
func daemonLog(t *testing.T, h *netnstest.Host) string {
	var ns uint64
	if err := h.Do(func() (err error) { ns, err = ctrl.NetNSID(); return }); err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(filepath.Join(ctrl.RunDir(ns, h.Iface), "daemon.log"))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// daemonStats reads `softfabric status --json` of h's device: the daemon's
// applications and the QPNs the classifier steers.
type daemonStats struct {
	QPs    int `json:"qps"`
	Daemon *struct {
		PID  int `json:"pid"`
		Apps []struct {
			PID    int      `json:"pid"`
			QPs    []uint32 `json:"qps"`
			Denied uint64   `json:"denied"`
		} `json:"apps"`
		Workers []struct {
			TxFrames uint64 `json:"tx_frames"`
			Looped   uint64 `json:"looped"`
		} `json:"workers"`
	} `json:"daemon"`
}

// appQPs is how many QPNs the daemon's applications hold.
func (s daemonStats) appQPs() int {
	n := 0
	if s.Daemon != nil {
		for _, a := range s.Daemon.Apps {
			n += len(a.QPs)
		}
	}
	return n
}

func status(t *testing.T, h *netnstest.Host) daemonStats {
	t.Helper()
	out, err := h.Command(sfBin, "status", h.Iface, "--json").Output()
	if err != nil {
		t.Fatalf("status: %v: %s", err, out)
	}
	var st []daemonStats
	if err := json.Unmarshal(out, &st); err != nil || len(st) != 1 {
		t.Fatalf("status: %v: %s", err, out)
	}
	return st[0]
}

// pairs starts n rma4 server/client pairs, each on a service of its own;
// extra is more environment for the clients.
func pairs(t *testing.T, p *netnstest.Pair, n, rounds int, extra ...string) (servers, clients []*proc) {
	t.Helper()
	a, b := p.A.Addr.Addr().String(), p.B.Addr.Addr().String()
	for i := range n {
		env := []string{fmt.Sprintf("%s=%d", serviceEnv, 7480+i), fmt.Sprintf("%s=%d", roundsEnv, rounds)}
		servers = append(servers, startRole(t, p.B, "rma4-server", b, a, env...))
	}
	for _, s := range servers {
		s.waitLine(t, "ready", 30*time.Second)
	}
	for i := range n {
		env := []string{fmt.Sprintf("%s=%d", serviceEnv, 7480+i), fmt.Sprintf("%s=%d", roundsEnv, rounds)}
		clients = append(clients, startRole(t, p.A, "rma4-client", a, b, append(env, extra...)...))
	}
	return servers, clients
}

// TestManyApps: eight applications on each device, each with four RC
// queue pairs, write and read back checked data at once through the two
// daemons; the daemons count them, and release everything as they exit.
func TestManyApps(t *testing.T) {
	p := pairUp(t)
	const apps = 8
	servers, clients := pairs(t, p, apps, 20, waitEnv+"=1")
	for _, c := range clients {
		c.waitLine(t, "connected", 60*time.Second)
	}
	// The classifier steers their queue pairs and QP1, where the daemon
	// routes RDMA-CM's MADs to them.
	if st := status(t, p.B); st.Daemon == nil || len(st.Daemon.Apps) != apps || st.appQPs() != apps*rma4EPs || st.QPs != apps*rma4EPs+1 {
		t.Errorf("B's status with %d applications connected: %+v (classifier QPNs %d)", apps, st.Daemon, st.QPs)
	}
	for _, c := range clients {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if err := c.wait(t, 120*time.Second); err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, c.output())
			for _, h := range []*netnstest.Host{p.A, p.B} {
				out, _ := h.Exec(sfBin, "status", h.Iface)
				t.Logf("%s:\n%s\ndaemon log:\n%s", h.NS, out, daemonLog(t, h))
			}
		}
	}
	for _, s := range servers {
		if err := s.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s: %v\n%s", s.name, err, s.output())
		}
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
		deadline := time.Now().Add(2 * time.Second)
		for {
			st := status(t, h)
			if len(st.Daemon.Apps) == 0 && st.QPs == 1 { // QP1 stays the daemon's
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: left after every application exited: %+v", h.NS, st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestManyAppsLoopback: four applications on one device, two pairs (a
// server and a client each, on services of their own), each with four RC
// queue pairs, write and read back checked data at once through the
// device's daemon, which loops every frame back between them: the
// applications of an MPI job on one host. Nothing goes to the NIC. (Four,
// not TestManyApps' eight on each side: all of them poll on this one
// host, beside the other packages' tests on CI's two cores.)
func TestManyAppsLoopback(t *testing.T) {
	p := pairUp(t)
	self := &netnstest.Pair{A: p.A, B: p.A}
	const n = 2
	servers, clients := pairs(t, self, n, 10, waitEnv+"=1")
	for _, c := range clients {
		c.waitLine(t, "connected", 60*time.Second)
	}
	if st := status(t, p.A); st.Daemon == nil || len(st.Daemon.Apps) != 2*n || st.appQPs() != 2*n*rma4EPs {
		t.Errorf("A's status with %d applications connected: %+v", 2*n, st.Daemon)
	}
	for _, c := range clients {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if err := c.wait(t, 120*time.Second); err != nil {
			out, _ := p.A.Exec(sfBin, "status", p.A.Iface)
			t.Errorf("%s: %v\n%s\n%s", c.name, err, c.output(), out)
		}
	}
	for _, s := range servers {
		if err := s.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s: %v\n%s", s.name, err, s.output())
		}
	}
	var looped, tx uint64
	for _, w := range status(t, p.A).Daemon.Workers {
		looped, tx = looped+w.Looped, tx+w.TxFrames
	}
	t.Logf("looped %d frames, sent %d to the NIC", looped, tx)
	if looped == 0 || tx != 0 {
		t.Fatalf("looped %d frames, sent %d to the NIC: want all looped", looped, tx)
	}
}

// TestAppKilled: an application killed with SIGKILL in the middle of its
// transfers. Within 1 s its daemon has released its queue pairs (the
// classifier steers none of them); its peer's next operation ends in the
// IBTA outcome of a dead responder (transport retries exceeded), or its
// endpoint is shut down when the connection manager sees the dead
// process's connection close first; another
// application pair on the same devices carries on to the end, untouched.
func TestAppKilled(t *testing.T) {
	p := pairUp(t)
	servers, clients := pairs(t, p, 2, 100000)
	for _, c := range clients {
		c.waitLine(t, "connected", 60*time.Second)
	}
	before := status(t, p.B)
	victim := servers[0]
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = victim.wait(t, 5*time.Second)
	for {
		st := status(t, p.B)
		if len(st.Daemon.Apps) == len(before.Daemon.Apps)-1 && st.appQPs() == before.appQPs()-rma4EPs {
			t.Logf("daemon released the killed application %v after SIGKILL", time.Since(killed))
			break
		}
		if time.Since(killed) > time.Second {
			t.Fatalf("1 s after SIGKILL: %+v (before: %+v)", st, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The peer learns it from whichever comes first: its requests' retries
	// running out, or the connection manager seeing the dead process's
	// connection close (the endpoint shut down).
	line := clients[0].waitLine(t, "peer-gone:", 20*time.Second)
	if !strings.Contains(line, "timed out") && !strings.Contains(line, "closed") && !strings.Contains(line, "not connected") {
		t.Errorf("the killed application's peer: %q, want a transport timeout (retries exceeded) or its endpoint shut down", line)
	}
	t.Logf("its peer: %s (%v after SIGKILL)", line, time.Since(killed))
	// The other pair is still going: stop it with fewer rounds left by
	// killing nothing; it must still be healthy now.
	select {
	case <-clients[1].done:
		t.Fatalf("the other application stopped: %v\n%s", clients[1].err, clients[1].output())
	default:
	}
	st := status(t, p.B)
	if len(st.Daemon.Apps) != 1 {
		t.Fatalf("B's daemon serves %+v, want the one application left", st.Daemon.Apps)
	}
}

// TestDaemonKilled: the daemon killed with SIGKILL under its
// applications. Within 1 s the server application, waiting on its CQ,
// gets its receives back in error and then ErrDeviceGone, and exits;
// `softfabric up` again restarts the daemon, and a new pair works.
func TestDaemonKilled(t *testing.T) {
	p := pairUp(t)
	servers, clients := pairs(t, p, 1, 100000)
	clients[0].waitLine(t, "connected", 60*time.Second)
	servers[0].waitLine(t, "accepted", 30*time.Second)
	st := status(t, p.B)
	if st.Daemon == nil {
		t.Fatalf("no daemon: %+v", st)
	}
	if err := syscall.Kill(st.Daemon.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	line := servers[0].waitLine(t, "device-gone:", 5*time.Second)
	if d := time.Since(killed); d > time.Second {
		t.Errorf("device gone seen %v after the daemon was killed, want within 1 s", d)
	}
	if !strings.Contains(servers[0].output(), "error-completion:") {
		t.Errorf("no error completion before device gone:\n%s", servers[0].output())
	}
	t.Logf("server application: %s (%v after SIGKILL)", line, time.Since(killed))
	if err := servers[0].wait(t, 5*time.Second); err != nil {
		t.Errorf("server: %v\n%s", err, servers[0].output())
	}
	clients[0].waitLine(t, "peer-gone:", 20*time.Second)
	out, err := p.B.Exec(sfBin, "up", p.B.Iface)
	if err != nil || !strings.Contains(out, "restarted") {
		t.Fatalf("up after the daemon died: %v: %s", err, out)
	}
	servers, clients = pairs(t, p, 1, 10)
	if err := clients[0].wait(t, 60*time.Second); err != nil {
		t.Fatalf("after the restart: %v\n%s", err, clients[0].output())
	}
	if err := servers[0].wait(t, 10*time.Second); err != nil {
		t.Fatalf("server after the restart: %v\n%s", err, servers[0].output())
	}
}
