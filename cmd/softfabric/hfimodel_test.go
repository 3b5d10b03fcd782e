package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfidevice"
)

// perf --hfi-model runs client and server on two modeled HFIs in this
// process and says so; large writes go by SDMA, the rest by PIO.
func TestPerfHFIModel(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"write", "--size", "65536", "--iters", "200"}, []string{"RDMA_Write BW Test", "by SDMA", "WFR"}},
		{[]string{"read", "--size", "262144", "--iters", "100"}, []string{"RDMA_Read BW Test", "by TID"}},
		{[]string{"read", "--size", "262144", "--iters", "100", "--hfi-eager"}, []string{"RDMA_Read BW Test", "(0 by TID)"}},
		{[]string{"read", "--lat", "--size", "64", "--iters", "50", "--hfi-chip", "jkr"}, []string{"RDMA_Read Latency Test", "t_median", "JKR"}},
		{[]string{"send", "--size", "5000", "--iters", "100", "--hfi-loss", "40"}, []string{"Send BW Test", "lost"}},
		{[]string{"atomic", "--iters", "100"}, []string{"Atomic FETCH_AND_ADD BW Test"}},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"perf", "--hfi-model"}, tc.args...)
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("run(%q) = %d, stderr %q", args, code, errOut.String())
		}
		s := out.String()
		for _, w := range append(tc.want, "SOFTWARE MODEL", "not on hardware") {
			if !strings.Contains(s, w) {
				t.Errorf("run(%q): no %q in\n%s", args, w, s)
			}
		}
	}
}

func TestPerfHFIModelFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"write", "host"}, "no server address"},
		{[]string{"udp"}, "runs write, read, send or atomic"},
		{[]string{"write", "--iface", "eth0"}, "--iface is not for --hfi-model"},
		{[]string{"write", "--compare"}, "--compare is not for --hfi-model"},
		{[]string{"write", "--hfi-chip", "cyr"}, "want wfr or jkr"},
		{[]string{"atomic", "--size", "16"}, "8 bytes"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"perf", "--hfi-model"}, tc.args...)
		if code := run(args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("run(%q) = %d, stderr %q; want an error with %q", args, code, errOut.String(), tc.err)
		}
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"write", "--iface", "eth0", "--hfi-eager"}, "--hfi-eager is for --hfi-model"},
		{[]string{"write", "--iface", "eth0", "--hfi-loss", "3"}, "--hfi-loss is for --hfi-model"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"perf"}, tc.args...)
		if code := run(args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("run(%q) = %d, stderr %q; want an error with %q", args, code, errOut.String(), tc.err)
		}
	}
}

// status lists the HFI units /dev holds (a fake /dev here: these machines
// have none), after the Ethernet devices, without opening them.
func TestStatusHFIUnits(t *testing.T) {
	dev := fstest.MapFS{
		"hfi1_0":       {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_1":       {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_diagpkt": {Mode: os.ModeDevice | os.ModeCharDevice},
		"null":         {Mode: os.ModeDevice | os.ModeCharDevice},
	}
	defer func(f func() ([]hfidev.Unit, error)) { hfiUnits = f }(hfiUnits)
	hfiUnits = func() ([]hfidev.Unit, error) { return hfidev.UnitsIn(dev, "/dev") }
	var out, errOut bytes.Buffer
	if code := run([]string{"status"}, &out, &errOut); code != 0 {
		t.Fatalf("status = %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, w := range []string{"hca_id:\thfi1_0\n", "hca_id:\thfi1_1\n", "(hfi1 user API, /dev/hfi1_1)", "verified against its software model only"} {
		if !strings.Contains(s, w) {
			t.Errorf("no %q in\n%s", w, s)
		}
	}
	if strings.Contains(s, "diagpkt") {
		t.Errorf("diagpkt listed:\n%s", s)
	}

	// Units a host has (hfidevice.NewModelHost's, a fake /dev and sysfs):
	// each port's state, and whether it can be opened by name.
	m, err := hfidevice.NewModelHost(abi.ChipJKR, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func(h hfidevice.Host) { hfidevice.DefaultHost = h }(hfidevice.DefaultHost)
	hfidevice.DefaultHost = m.Host
	m.SysfsFiles["hfi1_1/ports/1/state"].Data = []byte("2: INIT\n")
	hfiUnits = func() ([]hfidev.Unit, error) { return hfidev.UnitsIn(m.Dev, "/dev") }
	out.Reset()
	if code := run([]string{"status"}, &out, &errOut); code != 0 {
		t.Fatalf("status = %d: %s", code, errOut.String())
	}
	s = out.String()
	for _, w := range []string{"ACTIVE, LID 0x1, GID fe80::11:7501:101:1", "usable as --iface hfi1_0", "INIT, LID 0x2", "not usable: hfidevice: port not ACTIVE"} {
		if !strings.Contains(s, w) {
			t.Errorf("no %q in\n%s", w, s)
		}
	}

	// --json lists the same units, after the Ethernet devices.
	out.Reset()
	if code := run([]string{"status", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("status --json = %d: %s", code, errOut.String())
	}
	var all, js []HFIStatus
	if err := json.Unmarshal(out.Bytes(), &all); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	for _, h := range all {
		if h.Transport == "hfi1" { // not an Ethernet device that is up
			js = append(js, h)
		}
	}
	if len(js) != 2 {
		t.Fatalf("status --json: %d entries, want the 2 units:\n%s", len(js), out.String())
	}
	if h := js[0]; h.HCA != "hfi1_0" || h.Transport != "hfi1" || h.Path != "/dev/hfi1_0" || h.State != "ACTIVE" || h.LID != 1 ||
		h.GID != "fe80::11:7501:101:1" || !h.Usable || h.NotUsable != "" {
		t.Errorf("unit 0: %+v", h)
	}
	if h := js[1]; h.HCA != "hfi1_1" || h.State != "INIT" || h.LID != 2 || h.Usable || !strings.Contains(h.NotUsable, "port not ACTIVE") {
		t.Errorf("unit 1: %+v", h)
	}

	// None present: nothing about HFIs.
	hfiUnits = func() ([]hfidev.Unit, error) { return hfidev.UnitsIn(fstest.MapFS{}, "/dev") }
	out.Reset()
	if code := run([]string{"status"}, &out, &errOut); code != 0 || strings.Contains(out.String(), "hfi1") {
		t.Fatalf("status = %d:\n%s", code, out.String())
	}
}

// readyWriter is the server's stderr: it closes ready when the server
// says it waits for a client. Read it only once the server has returned.
type readyWriter struct {
	bytes.Buffer
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "waiting for a client") {
		close(w.ready)
	}
	return w.Buffer.Write(p)
}

// perf --iface hfi1_N as on a host with HFIs, verified against the model
// only: the units are hfidevice.NewModelHost's (a fake /dev and sysfs
// whose nodes two modeled units serve, a peers file each). The server
// runs on hfi1_1, the client on hfi1_0 with --hfi-peers; the out-of-band
// exchange runs over TCP on loopback between the units' addresses.
func TestPerfHFIUnit(t *testing.T) {
	m, err := hfidevice.NewModelHost(abi.ChipWFR, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func(h hfidevice.Host) { hfidevice.DefaultHost = h }(hfidevice.DefaultHost)
	hfidevice.DefaultHost = m.Host
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	var srvOut bytes.Buffer
	srvErr := readyWriter{ready: make(chan struct{})}
	served := make(chan int, 1)
	go func() {
		served <- run([]string{"perf", "write", "--iface", "hfi1_1", "--port", port, "--timeout", "60s"}, &srvOut, &srvErr)
	}()
	select {
	case code := <-served:
		t.Fatalf("server = %d: %s", code, srvErr.String())
	case <-srvErr.ready:
	}
	var out, errOut bytes.Buffer
	args := []string{"perf", "write", "--iface", "hfi1_0", "--hfi-peers", filepath.Join(m.PeersDir, "hfi1_0.peers"),
		"--size", "65536", "--iters", "200", "--port", port, "127.0.0.2"}
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("run(%q) = %d, stderr %q", args, code, errOut.String())
	}
	if code := <-served; code != 0 {
		t.Fatalf("server = %d: %s", code, srvErr.String())
	}
	if s := out.String(); !strings.Contains(s, "RDMA_Write BW Test") {
		t.Errorf("client:\n%s", s)
	}
	if !strings.Contains(errOut.String(), "verified against its software model only") || !strings.Contains(srvOut.String(), "served write") {
		t.Errorf("client stderr %q; server %q", errOut.String(), srvOut.String())
	}
	if w := m.Wire.Stats(); w.Carried < 200*16 {
		t.Errorf("wire %+v", w)
	}

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"perf", "write", "--iface", "hfi1_7", "--port", port}, "no such hfi1 unit"},
		{[]string{"perf", "write", "--iface", "hfi1_0", "--compare", "--port", port, "127.0.0.2"}, "no AF_XDP baseline"},
		{[]string{"perf", "write", "--iface", "eth0", "--hfi-peers", "x", "--port", port}, "--hfi-peers is for --iface hfi1_N"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(tc.args, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), tc.err) {
			t.Errorf("run(%q) = %d, stderr %q; want an error with %q", tc.args, code, errOut.String(), tc.err)
		}
	}
}
