package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/sfbin"
	"github.com/softfabric/softfabric/internal/syncbuf"
)

// sfBin is the softfabric command built for these tests.
var sfBin string

func TestMain(m *testing.M) {
	if iface := os.Getenv(memAppEnv); iface != "" {
		os.Exit(memApp(iface))
	}
	if path := os.Getenv(floodEnv); path != "" {
		os.Exit(flood(path))
	}
	bin, cleanup, err := sfbin.Build("../cmd/softfabric")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sfBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// setup makes two hosts and mounts the host bpffs every `ip netns exec`
// shares (see ctrl.BPFRoot).
func setup(t *testing.T, o netnstest.Options, wired bool) *netnstest.Pair {
	t.Helper()
	netnstest.Require(t)
	if err := ctrl.EnsureBPFFS(); err != nil {
		t.Fatal(err)
	}
	// Queues 0: veths as users make them, with the kernel's queue counts.
	var p *netnstest.Pair
	if wired {
		p = netnstest.NewWiredPair(t, o)
	} else {
		p = netnstest.NewPair(t, o)
	}
	return p
}

type result struct {
	out, err string
	code     int
}

// sf runs softfabric in h's namespace.
func sf(h *netnstest.Host, args ...string) result { return runCmd(h.Command(sfBin, args...)) }

// runCmd runs cmd and returns its output and exit status.
func runCmd(cmd *netnstest.Cmd) result {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return result{out.String(), errb.String(), code}
}

func mustSF(t *testing.T, h *netnstest.Host, args ...string) string {
	t.Helper()
	r := sf(h, args...)
	if r.code != 0 {
		t.Fatalf("softfabric %s in %s: exit %d\n%s%s", strings.Join(args, " "), h.NS, r.code, r.out, r.err)
	}
	return r.out
}

// up brings softfabric up on each host as users do: with a daemon that
// serves the applications.
func up(t *testing.T, hosts ...*netnstest.Host) {
	t.Helper()
	upWith(t, nil, hosts...)
}

// upInProcess brings softfabric up without a daemon: the first
// application to open the device owns it (what the raw baselines and the
// single-owner tests need).
func upInProcess(t *testing.T, hosts ...*netnstest.Host) {
	t.Helper()
	upWith(t, []string{"--no-daemon"}, hosts...)
}

func upWith(t *testing.T, flags []string, hosts ...*netnstest.Host) {
	t.Helper()
	for _, h := range hosts {
		mustSF(t, h, append([]string{"up", h.Iface}, flags...)...)
		t.Cleanup(func() {
			start := time.Now()
			r := sf(h, "down", h.Iface)
			if d := time.Since(start); d > time.Second {
				t.Logf("down in %s took %v: %+v", h.NS, d, r)
			}
		})
	}
}

// xdpAttached reports whether an XDP program is attached to h's interface,
// in any mode.
func xdpAttached(t *testing.T, h *netnstest.Host) bool {
	t.Helper()
	x, err := h.XDP()
	if err != nil {
		t.Fatal(err)
	}
	return x.Attached
}

// leftovers lists what softfabric left in a namespace: an XDP program, pins,
// state files.
func leftovers(t *testing.T, h *netnstest.Host) []string {
	t.Helper()
	var left []string
	if xdpAttached(t, h) {
		left = append(left, "XDP program attached")
	}
	var ns uint64
	if err := h.Do(func() (err error) { ns, err = ctrl.NetNSID(); return }); err != nil {
		t.Fatal(err)
	}
	// The namespace's directories too: the tests' namespaces have one
	// interface up at a time.
	bpfDir, runDir := ctrl.BPFDir(ns, h.Iface), ctrl.RunDir(ns, h.Iface)
	for _, d := range []string{bpfDir, runDir, filepath.Dir(bpfDir), filepath.Dir(runDir)} {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}

func TestUpStatusDown(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	out := mustSF(t, p.B, "up", "eth0")
	if !strings.Contains(out, "eth0 up") {
		t.Fatalf("up said %q", out)
	}
	if out := mustSF(t, p.B, "up", "eth0"); !strings.Contains(out, "already up") {
		t.Fatalf("second up said %q", out)
	}
	var st []map[string]any
	if err := json.Unmarshal([]byte(mustSF(t, p.B, "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0]["iface"] != "eth0" || st[0]["state"] != "PORT_ACTIVE" || st[0]["queues"].(float64) != 1 ||
		st[0]["queue_source"] != "ethtool" || st[0]["serves"].(float64) != 1 {
		t.Fatalf("status: %+v", st)
	}
	gids := fmt.Sprint(st[0]["gids"])
	if !strings.Contains(gids, "0000:0000:0000:0000:0000:ffff:c612:0002") {
		t.Fatalf("GIDs %s lack the IPv4-mapped GID of 198.18.0.2", gids)
	}
	text := mustSF(t, p.B, "status", "eth0")
	for _, want := range []string{"hca_id:\tsoftfabric_eth0", "PORT_ACTIVE", "GID[0]: fe80:", "redirected", "queues:\t\t\t1 active of "} {
		if !strings.Contains(text, want) {
			t.Fatalf("status lacks %q:\n%s", want, text)
		}
	}
	// The kernel stack is untouched: ping and TCP both ways.
	if out, err := p.A.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.0.2"); err != nil {
		t.Fatalf("ping with softfabric up: %v\n%s", err, out)
	}
	checkTCP(t, p)
	c0 := counters(t, p.B)
	if c0["passed"] == 0 {
		t.Fatalf("the classifier passed no frame to the kernel: %v", c0)
	}
	mustSF(t, p.B, "down", "eth0")
	if left := leftovers(t, p.B); len(left) != 0 {
		t.Fatalf("down left %v", left)
	}
	if r := sf(p.B, "down", "eth0"); r.code == 0 || !strings.Contains(r.err, "not up") {
		t.Fatalf("second down: %+v", r)
	}
}

func counters(t *testing.T, h *netnstest.Host) map[string]uint64 {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(mustSF(t, h, "stats", h.Iface, "--json")), &c); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for k, v := range c {
		if f, ok := v.(float64); ok {
			out[strings.ToLower(k)] = uint64(f)
		}
	}
	return out
}

func checkTCP(t *testing.T, p *netnstest.Pair) {
	t.Helper()
	var ln net.Listener
	if err := p.B.Do(func() (err error) { ln, err = net.Listen("tcp", "198.18.0.2:7001"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			b := make([]byte, 1<<16)
			n, _ := c.Read(b)
			c.Write(b[:n])
			c.Close()
		}
	}()
	if err := p.A.Do(func() error {
		c, err := net.DialTimeout("tcp", "198.18.0.2:7001", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("softfabric")); err != nil {
			return err
		}
		b := make([]byte, 10)
		if _, err := c.Read(b); err != nil || string(b) != "softfabric" {
			return fmt.Errorf("echo %q: %v", b, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("TCP with softfabric up: %v", err)
	}
}

func TestCLIErrors(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"up", "nope0"}, 1, `interface "nope0" not found`},
		{[]string{"up"}, 2, "exactly one interface"},
		{[]string{"up", "eth0", "--mode", "sideways"}, 2, "--mode"},
		{[]string{"up", "eth0", "--queues", "4097"}, 1, "eth0 has 1 active queue; --queues 4097 needs more: the driver allocated only "},
		{[]string{"up", "eth0", "--mtu", "100"}, 2, "--mtu"},
		{[]string{"up", "eth0", "--max-apps", "-1"}, 2, "--max-apps -1: want a positive number"},
		{[]string{"daemon", "eth0", "--max-apps", "-1"}, 2, "--max-apps -1: want a positive number"},
		{[]string{"up", "eth0", "--cpus", "3-1"}, 2, "--cpus"},
		{[]string{"perf", "write"}, 2, "--iface is required"},
		{[]string{"perf", "frob", "--iface", "eth0"}, 2, "unknown operation"},
		{[]string{"perf", "write", "--iface", "eth0", "--mtu", "1000"}, 2, "--mtu"},
		{[]string{"perf", "write", "--iface", "eth0", "--bogus"}, 2, "bogus"},
		{[]string{"perf", "write", "--iface", "eth0", "198.18.0.1"}, 1, "not up"},
		{[]string{"down", "eth0"}, 1, "not up"},
		{[]string{"status", "nope0"}, 1, "not found"},
	} {
		r := sf(p.A, tc.args...)
		lines := strings.Count(strings.TrimRight(r.err, "\n"), "\n") + 1
		if r.code != tc.code || !strings.Contains(r.err, tc.msg) || lines != 1 || r.out != "" {
			t.Errorf("softfabric %s: exit %d, stderr %q, stdout %q; want exit %d and one line with %q",
				strings.Join(tc.args, " "), r.code, r.err, r.out, tc.code, tc.msg)
		}
	}
}

// TestForeignXDP: up refuses an interface whose XDP program someone else
// attached (here with ip(8), the old way), and leaves it alone.
func TestForeignXDP(t *testing.T) {
	netnstest.RequireIP(t)
	p := setup(t, netnstest.Options{}, false)
	obj, err := filepath.Abs("../bpf/classifier_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := p.A.Exec("ip", "link", "set", "dev", "eth0", "xdpgeneric", "obj", obj, "sec", "xdp"); err != nil {
		t.Fatalf("attaching a foreign program: %v\n%s", err, out)
	}
	r := sf(p.A, "up", "eth0")
	if r.code != 1 || !strings.Contains(r.err, "attached by someone else") {
		t.Fatalf("up over a foreign XDP program: %+v", r)
	}
	if !xdpAttached(t, p.A) {
		t.Fatal("up removed the foreign program")
	}
	if left := leftovers(t, p.A); len(left) != 1 || left[0] != "XDP program attached" {
		t.Fatalf("a refused up left %v", left)
	}
}

// TestDeviceBusy: a second process gets "device busy (pid N)".
func TestDeviceBusy(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	upInProcess(t, p.A)
	srv := p.A.Command(sfBin, "perf", "write", "--iface", "eth0", "--timeout", "20s")
	var errb bytes.Buffer
	srv.Stderr = &errb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(errb.String(), "waiting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	r := sf(p.A, "perf", "write", "--iface", "eth0", "--port", "18600")
	if r.code != 1 || !strings.Contains(r.err, "device busy (pid ") {
		t.Fatalf("second owner: %+v (server: %s)", r, errb.String())
	}
	if r := sf(p.A, "down", "eth0"); r.code != 1 || !strings.Contains(r.err, "device busy") {
		t.Fatalf("down while owned: %+v", r)
	}
}

// perfPair runs a perf server in b and a client in a, returning the
// client's JSON results.
func perfPair(t *testing.T, p *netnstest.Pair, serverArgs []string, clientArgs ...string) []map[string]any {
	t.Helper()
	args := append([]string{"perf"}, serverArgs...)
	args = append(args, "--iface", p.B.Iface, "--json", "--timeout", "60s")
	srv := p.B.Command(sfBin, args...)
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Wait() }()
	defer func() { srv.Process.Kill(); wg.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cargs := append([]string{"perf"}, clientArgs...)
	cargs = append(cargs, "--iface", p.A.Iface, "--json", "--timeout", "60s", p.B.Addr.Addr().String())
	out := mustSF(t, p.A, cargs...)
	var rs []map[string]any
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return rs
}

func TestPerfAllOps(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	before := counters(t, p.B)
	for _, op := range []string{"write", "read", "send", "atomic"} {
		size := "4096"
		if op == "atomic" {
			size = "8"
		}
		rs := perfPair(t, p, []string{op}, op, "--size", size, "--iters", "2000", "--qps", "2")
		if len(rs) != 1 || rs[0]["iterations"].(float64) != 2000 || rs[0]["msg_rate_mpps"].(float64) <= 0 {
			t.Fatalf("%s: %+v", op, rs)
		}
		if op == "send" && rs[0]["received"].(float64) != 2000 {
			t.Fatalf("send: server received %v of 2000", rs[0]["received"])
		}
	}
	after := counters(t, p.B)
	if after["redirected"]-before["redirected"] < 8000 {
		t.Fatalf("classifier redirected %d frames for 8000 requests", after["redirected"]-before["redirected"])
	}
	if n := after["unknownqpn"] + after["nosocket"] + after["badpkey"] + after["badversion"]; n != 0 {
		t.Fatalf("classifier dropped RoCE frames: %v", after)
	}
}

func TestPingPong(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	srv := p.B.Command(sfBin, "pingpong", "--iface", "eth0", "-n", "500")
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := mustSF(t, p.A, "pingpong", "--iface", "eth0", "-n", "500", "198.18.0.2")
	if !strings.Contains(out, "4096000 bytes in") || !strings.Contains(out, "500 iters in") {
		t.Fatalf("pingpong: %q", out)
	}
}

// TestCrashedOwner: a perf process killed with SIGKILL leaves its queues
// and QPNs behind; the next process takes the device over and works.
func TestCrashedOwner(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	srv := p.B.Command(sfBin, "perf", "write", "--iface", "eth0", "--timeout", "20s")
	var serr bytes.Buffer
	srv.Stderr = &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	srv.Process.Kill()
	srv.Wait()
	rs := perfPair(t, p, []string{"write"}, "write", "--size", "1024", "--iters", "500")
	if len(rs) != 1 || rs[0]["iterations"].(float64) != 500 {
		t.Fatalf("after a crashed owner: %+v", rs)
	}
}

// TestTwoPerfPairs: two `softfabric perf` pairs at once on one pair of
// namespaces (different ports), through the daemons: both complete, and
// each daemon served both applications.
func TestTwoPerfPairs(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A, p.B)
	ports := []string{"18515", "18600"}
	var srvs []*netnstest.Cmd
	var serrs []*syncbuf.Buffer
	for _, port := range ports {
		srv := p.B.Command(sfBin, "perf", "write", "--iface", p.B.Iface, "--port", port, "--json", "--timeout", "60s")
		serr := &syncbuf.Buffer{}
		srv.Stderr = serr
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		srvs, serrs = append(srvs, srv), append(serrs, serr)
	}
	defer func() {
		for _, s := range srvs {
			_ = s.Process.Kill()
			_ = s.Wait()
		}
	}()
	for i, serr := range serrs {
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(serr.String(), "waiting") {
			t.Fatalf("server %d: %s", i, serr.String())
		}
	}
	if n := daemonApps(t, p.B); n != 2 {
		t.Fatalf("B's daemon serves %d applications, want the 2 servers", n)
	}
	if r := sf(p.B, "down", p.B.Iface); r.code != 1 || !strings.Contains(r.err, "in use by 2 application(s)") {
		t.Fatalf("down with two applications attached: %+v", r)
	}
	var wg sync.WaitGroup
	results := make([]result, len(ports))
	for i, port := range ports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = sf(p.A, "perf", "write", "--iface", p.A.Iface, "--port", port, "--size", "4096", "--iters", "3000", "--qps", "2",
				"--json", "--timeout", "60s", p.B.Addr.Addr().String())
		}()
	}
	wg.Wait()
	for i, r := range results {
		var rs []map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.out), &rs) != nil || len(rs) != 1 || rs[0]["iterations"].(float64) != 3000 {
			t.Fatalf("client %d: %+v", i, r)
		}
	}
	// A's worker sent both clients' writes, at most 32 frames a kick
	// (txBurst, ctrl/daemon): between kicks it looks at the NIC, where
	// the ACKs that let the clients queue more come in.
	for _, w := range daemonStats(t, p.A).Workers {
		if w.TxFrames < 2*2*3000 || w.Kicks == 0 || w.TxFrames > 32*w.Kicks {
			t.Errorf("A's worker %d: %d frames sent in %d kicks; want at least the 12000 writes, at most 32 frames a kick", w.Queue, w.TxFrames, w.Kicks)
		}
	}
}

// daemonApps is how many applications h's daemon serves.
func daemonApps(t *testing.T, h *netnstest.Host) int { return len(daemonAppStats(t, h)) }

// daemonAppStats are the applications h's daemon serves, as `status
// --json` shows them.
func daemonAppStats(t *testing.T, h *netnstest.Host) []daemonapi.AppStats {
	t.Helper()
	return daemonStats(t, h).Apps
}

// daemonStats is what `status --json` shows of h's daemon.
func daemonStats(t *testing.T, h *netnstest.Host) *daemonapi.Stats {
	t.Helper()
	var st []struct {
		Daemon *daemonapi.Stats `json:"daemon"`
	}
	if err := json.Unmarshal([]byte(mustSF(t, h, "status", h.Iface, "--json")), &st); err != nil || len(st) != 1 || st[0].Daemon == nil {
		t.Fatalf("status: %v", err)
	}
	return st[0].Daemon
}

// TestDaemonMetrics: `up --metrics ADDR` serves Prometheus metrics: the
// classifier's verdicts, the workers' frames, and each application's
// frames and the transport counters it reports.
func TestDaemonMetrics(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.A)
	addr := net.JoinHostPort(p.B.Addr.Addr().String(), "9435")
	upWith(t, []string{"--metrics", addr}, p.B)
	srv := p.B.Command(sfBin, "perf", "write", "--iface", p.B.Iface, "--json", "--timeout", "60s")
	serr := &syncbuf.Buffer{}
	srv.Stderr = serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	mustSF(t, p.A, "perf", "write", "--iface", p.A.Iface, "--size", "1024", "--iters", "3000", "--json", "--timeout", "60s", p.B.Addr.Addr().String())
	scrape := func() string {
		t.Helper()
		var body []byte
		if err := p.B.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
				return err
			}
			body, err = io.ReadAll(c)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return string(body)
	}
	value := func(text, prefix string) float64 {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, prefix) {
				f := strings.Fields(l)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				return v
			}
		}
		return -1
	}
	text := scrape()
	for _, m := range []string{`softfabric_classifier_frames_total{iface="eth0",verdict="redirected"}`, `softfabric_worker_rx_frames_total{iface="eth0",queue="0"}`} {
		if v := value(text, m); v < 3000 {
			t.Errorf("%s = %v after 3000 writes\n%s", m, v, text)
		}
	}
	if v := value(text, `softfabric_worker_tx_frames_total{iface="eth0",queue="0"}`); v < 1 {
		t.Errorf("no acknowledgement sent for 3000 writes:\n%s", text)
	}
	if v := value(text, `softfabric_worker_tx_kicks_total{iface="eth0",queue="0"}`); v < 1 {
		t.Errorf("acknowledgements sent with no sendto(2) counted:\n%s", text)
	}
	for _, m := range []string{`softfabric_worker_parked_total{iface="eth0",queue="0"}`, `softfabric_worker_parked_frames{iface="eth0",queue="0"}`,
		`softfabric_control_connections_refused_total{how="refused",iface="eth0"}`, `softfabric_control_connections_refused_total{how="dropped",iface="eth0"}`} {
		if v := value(text, m); v < 0 {
			t.Errorf("no %s:\n%s", m, text)
		}
	}
	// The server is still attached until it exits: its frames, and the
	// transport counters it reports every second.
	if v := value(text, `softfabric_applications{iface="eth0"}`); v < 0 {
		t.Errorf("no softfabric_applications:\n%s", text)
	}
	// One queue: two rings of 1024 slots of 4 KiB and their header lines.
	if v := value(text, `softfabric_application_ring_bytes{iface="eth0"}`); v < 2*1024*4096 || v > 2*1024*(4096+64)+8192 {
		t.Errorf("softfabric_application_ring_bytes %v:\n%s", v, text)
	}
	_ = srv.Wait()
	srv = p.B.Command(sfBin, "perf", "write", "--iface", p.B.Iface, "--timeout", "60s")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(text, `softfabric_application_transport_total{`) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		text = scrape()
	}
	for _, m := range []string{`softfabric_applications{iface="eth0"} 1`, `softfabric_application_transport_total{`, `counter="retransmits"`, `softfabric_application_frames_total{`} {
		if !strings.Contains(text, m) {
			t.Errorf("no %s with an application attached:\n%s", m, text)
		}
	}
}

// TestDownForce: `down` refuses while an application uses the daemon;
// `down --force` stops it under the application, which exits at once
// with one line saying its device is gone.
func TestDownForce(t *testing.T) {
	p := setup(t, netnstest.Options{}, false)
	up(t, p.B)
	srv := p.B.Command(sfBin, "perf", "write", "--iface", p.B.Iface, "--timeout", "30s")
	serr := &syncbuf.Buffer{}
	srv.Stderr = serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(serr.String(), "waiting") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if r := sf(p.B, "down", p.B.Iface); r.code != 1 || !strings.Contains(r.err, "in use by 1 application(s)") {
		t.Fatalf("down with an application attached: %+v", r)
	}
	mustSF(t, p.B, "down", p.B.Iface, "--force")
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(serr.String(), "softfabric device gone") {
			t.Fatalf("the server after down --force: %v: %s", err, serr.String())
		}
	case <-time.After(2 * time.Second):
		_ = srv.Process.Kill()
		t.Fatalf("the server still runs 2 s after down --force: %s", serr.String())
	}
	mustSF(t, p.B, "up", p.B.Iface) // the cleanup's down finds it up
}
