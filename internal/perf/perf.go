// Package perf measures a softfabric device the way perftest measures a
// verbs device: bandwidth, message rate and latency of RDMA write, RDMA
// read, send and atomic between a client and a server, connected out of
// band over TCP. The client drives the test; the server answers.
package perf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob"
)

// Ops are the RDMA operations perf measures.
var Ops = []string{"write", "read", "send", "atomic"}

// Config is a test as the client asks for it.
type Config struct {
	Op       string
	Size     int           // message size in bytes (atomic: 8)
	Iters    int           // messages; ignored when Duration is set
	Duration time.Duration // run for this long instead of Iters
	QPs      int           // queue pairs, requests spread round robin
	Lat      bool          // latency: one request in flight
	MTU      int           // path MTU; 0 takes the device's active MTU
	Window   int           // requests in flight per queue pair (bandwidth; perftest's -t), default 128
}

// Result is what a test measured.
type Result struct {
	Op      string  `json:"op"`
	Bytes   int     `json:"bytes"`
	Iters   int     `json:"iterations"`
	QPs     int     `json:"qps"`
	MTU     int     `json:"mtu"`
	Seconds float64 `json:"seconds"`

	BWPeakGbps  float64 `json:"bw_peak_gbps,omitempty"`
	BWAvgGbps   float64 `json:"bw_avg_gbps,omitempty"`
	BWPeakMBps  float64 `json:"bw_peak_mbps,omitempty"`
	BWAvgMBps   float64 `json:"bw_avg_mbps,omitempty"`
	MsgRateMpps float64 `json:"msg_rate_mpps,omitempty"`

	LatMinUs    float64 `json:"lat_min_us,omitempty"`
	LatMedianUs float64 `json:"lat_median_us,omitempty"`
	LatP99Us    float64 `json:"lat_p99_us,omitempty"`
	LatMaxUs    float64 `json:"lat_max_us,omitempty"`
	LatAvgUs    float64 `json:"lat_avg_us,omitempty"`

	// Received is how many messages the server saw (send only).
	Received int `json:"received,omitempty"`

	// What the client's queue pairs went through.
	Transport

	// Workers are the frames each of this side's workers handled during
	// the test (softfabric's own tests, not the perftest modes).
	Workers []WorkerStats `json:"workers,omitempty"`

	// CPU time of each side's process over the measured interval (see
	// CPU), and per KiB of payload moved (bandwidth) or per round trip
	// (latency).
	CPUClientUserS    float64 `json:"cpu_client_user_s,omitempty"`
	CPUClientSysS     float64 `json:"cpu_client_sys_s,omitempty"`
	CPUServerUserS    float64 `json:"cpu_server_user_s,omitempty"`
	CPUServerSysS     float64 `json:"cpu_server_sys_s,omitempty"`
	CPUClientNsPerKiB float64 `json:"cpu_client_ns_per_kib,omitempty"`
	CPUServerNsPerKiB float64 `json:"cpu_server_ns_per_kib,omitempty"`
	CPUClientNsPerOp  float64 `json:"cpu_client_ns_per_op,omitempty"`
	CPUServerNsPerOp  float64 `json:"cpu_server_ns_per_op,omitempty"`
}

// WorkerStats are one worker's frames during a test: received from its
// queue, sent on it, and handed over between workers because they arrived
// on a queue other than their queue pair's worker's.
type WorkerStats struct {
	Worker       int    `json:"worker"`
	RxFrames     uint64 `json:"rx_frames"`
	TxFrames     uint64 `json:"tx_frames"`
	HandedOff    uint64 `json:"handed_off"`
	HandedIn     uint64 `json:"handed_in"`
	HandoffDrops uint64 `json:"handoff_drops"`
}

// Transport counts what a test's queue pairs went through.
type Transport struct {
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	Probes      uint64 `json:"probes"`
	SeqNAKs     uint64 `json:"seq_naks"`
}

// plus is t and u added up.
func (t Transport) plus(u Transport) Transport {
	return Transport{t.Retransmits + u.Retransmits, t.Timeouts + u.Timeouts, t.Probes + u.Probes, t.SeqNAKs + u.SeqNAKs}
}

// since is what grew from before to t.
func (t Transport) since(before Transport) Transport {
	return Transport{t.Retransmits - before.Retransmits, t.Timeouts - before.Timeouts, t.Probes - before.Probes, t.SeqNAKs - before.SeqNAKs}
}

func (c *Config) check() error {
	if !slices.Contains(Ops, c.Op) {
		return fmt.Errorf("unknown operation %q (want write, read, send or atomic)", c.Op)
	}
	if c.Op == "atomic" {
		if c.Size != 0 && c.Size != 8 {
			return errors.New("atomic operations are 8 bytes")
		}
		c.Size = 8
	}
	if c.Size < 0 || c.Size > 1<<30 {
		return fmt.Errorf("size %d outside 0..1 GiB", c.Size)
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.QPs < 0 || c.QPs > 64 {
		return fmt.Errorf("qps %d outside 1..64", c.QPs)
	}
	c.defaultIters()
	if c.Iters < 0 {
		return fmt.Errorf("iterations %d is negative", c.Iters)
	}
	if c.Window == 0 {
		c.Window = 128
	}
	if c.Lat {
		c.Window = 1
	}
	return nil
}

// Serve answers a client on l: it accepts one connection and runs the
// tests the client asks for, one after another, until the client says
// QUIT or hangs up. It returns what each test saw.
func Serve(ctx context.Context, d *Device, l net.Listener) ([]Result, error) {
	nc, err := l.Accept()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	c := newConn(nc)
	var results []Result
	for {
		line, err := c.recv()
		if err != nil {
			if len(results) > 0 {
				return results, nil
			}
			return nil, err
		}
		if line == "QUIT" {
			return results, nil
		}
		p, err := parseParams(line)
		if err != nil {
			_ = c.send("ERR %v", err)
			return results, err
		}
		cfg := Config{Op: p.Op, Size: p.Size, QPs: p.QPs, Iters: p.Iters, Lat: p.Lat, MTU: p.MTU}
		c.cpu = p.CPU
		var r Result
		switch {
		case slices.Contains(Baselines, cfg.Op):
			r, err = serveBaseline(ctx, d, c, cfg)
		default:
			r, err = serveRDMA(ctx, d, c, cfg)
		}
		if err != nil {
			_ = c.send("ERR %v", err)
			return results, err
		}
		results = append(results, r)
	}
}

// serveRDMA answers one RDMA test on a domain of its own, whose
// workers drive the transport (automatic progress).
func serveRDMA(ctx context.Context, d *Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	local, _ := localAddr(c.c)
	// The domain's workers drive the transport (automatic progress): a
	// lane driving its worker itself (manual progress, as the client's do)
	// measured slower here, at every size (BENCHMARKS.md).
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressAuto, 16, epQueue)
	if err != nil {
		return Result{}, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}
	ls, err := newLanes(fb, cfg.QPs, cfg.Size, cfg.Lat, false)
	if err != nil {
		return Result{}, err
	}
	defer ls.close()
	if err := c.send("OK mtu=%d", cfg.MTU); err != nil {
		return Result{}, err
	}
	peers := make([]qpInfo, cfg.QPs)
	for i := range peers {
		if peers[i], err = c.recvQP(); err != nil {
			return Result{}, err
		}
	}
	gid, err := fb.gid()
	if err != nil {
		return Result{}, err
	}
	for _, q := range ls.infos(gid) {
		if err := c.sendQP(q); err != nil {
			return Result{}, err
		}
	}
	if err := ls.connect(ctx, peers, cfg.MTU); err != nil {
		return Result{}, err
	}
	if cfg.Op == "send" {
		if err := ls.postRecvs(cfg.Size); err != nil {
			return Result{}, err
		}
	}
	if err := c.send("READY"); err != nil {
		return Result{}, err
	}
	// The client says DONE over TCP when it has finished; until then keep
	// the receive queues full.
	before, c0 := fb.dom.WorkerStats(), cpuNow()
	received, err := ls.serve(ctx, cfg.Op == "send", c.expectAsync("DONE"))
	if err != nil {
		return Result{}, err
	}
	cpu := c0.since()
	// Let the last ACKs out before the QPs go away.
	time.Sleep(20 * time.Millisecond)
	if err := c.sendStats(cpu, "STATS %d", received); err != nil {
		return Result{}, err
	}
	return Result{Op: cfg.Op, Bytes: cfg.Size, QPs: cfg.QPs, MTU: cfg.MTU, Received: received, Workers: workerDeltas(before, fb.dom.WorkerStats())}, nil
}

// errFinished ends a Run loop whose work is done.
var errFinished = errors.New("finished")

// expectAsync reads the next line in the background, for a side that must
// keep polling its device while it waits.
func (c *conn) expectAsync(word string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.expect(word)
		done <- err
	}()
	return done
}

func localAddr(c net.Conn) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	return ap.Addr().Unmap(), err
}

// Run is the client: it connects to server (host:port) and runs the tests
// in order over one connection, returning their results. A baseline that
// measured nothing (*BaselineError) is left out of the results and the
// tests after it still run; the error returned then joins those, in one
// line. Any other failure ends the run, with the results before it.
func Run(ctx context.Context, d *Device, server string, cfgs ...Config) ([]Result, error) {
	nc, err := oob.Dial(ctx, server, DefaultPort, "perf")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	c := newConn(nc)
	var results []Result
	var empty []error
	for _, cfg := range cfgs {
		var r Result
		if slices.Contains(Baselines, cfg.Op) {
			r, err = runBaseline(ctx, d, c, cfg)
		} else {
			r, err = runRDMA(ctx, d, c, cfg)
		}
		if be := (*BaselineError)(nil); errors.As(err, &be) {
			empty = append(empty, err)
			continue
		}
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	_ = c.send("QUIT")
	return results, joinLine(empty)
}

// joinLine joins errs as errors.Join does, on one line.
func joinLine(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w; %w", errs[0], joinLine(errs[1:]))
}

func runRDMA(ctx context.Context, d *Device, c *conn, cfg Config) (Result, error) {
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	local, _ := localAddr(c.c)
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressManual, 2*cfg.Window, 16)
	if err != nil {
		return Result{}, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}
	if err := c.sendParams(params{Op: cfg.Op, Size: cfg.Size, QPs: cfg.QPs, Iters: cfg.Iters, Lat: cfg.Lat, MTU: cfg.MTU}); err != nil {
		return Result{}, err
	}
	f, err := c.expect("OK")
	if err != nil {
		return Result{}, err
	}
	for _, kv := range f {
		if v, ok := cutPrefix(kv, "mtu="); ok {
			if m, err := strconv.Atoi(v); err == nil && m < cfg.MTU {
				cfg.MTU = m
			}
		}
	}
	ls, err := newLanes(fb, cfg.QPs, cfg.Size, cfg.Lat, cfg.Op != "atomic")
	if err != nil {
		return Result{}, err
	}
	defer ls.close()
	gid, err := fb.gid()
	if err != nil {
		return Result{}, err
	}
	for _, q := range ls.infos(gid) {
		if err := c.sendQP(q); err != nil {
			return Result{}, err
		}
	}
	peers := make([]qpInfo, cfg.QPs)
	for i := range peers {
		if peers[i], err = c.recvQP(); err != nil {
			return Result{}, err
		}
	}
	if err := ls.connect(ctx, peers, cfg.MTU); err != nil {
		return Result{}, err
	}
	if _, err := c.expect("READY"); err != nil {
		return Result{}, err
	}
	before, c0 := fb.dom.WorkerStats(), cpuNow()
	res, err := ls.run(ctx, fb, cfg, peers)
	if err != nil {
		return Result{}, err
	}
	cpu := c0.since()
	fb.drainUntil(time.Now().Add(5 * time.Millisecond))
	res.Workers = workerDeltas(before, fb.dom.WorkerStats())
	st, err := c.finish()
	if err != nil {
		return Result{}, err
	}
	if len(st) >= 1 {
		res.Received, _ = strconv.Atoi(st[0])
	}
	scpu, ok := parseCPU(st[min(1, len(st)):])
	setCPU(&res, cpu, scpu, ok)
	return res, nil
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return "", false
}

// defaultIters sets perftest's default iteration counts when none is
// given: 5000 for bandwidth, 1000 for latency.
func (c *Config) defaultIters() {
	if c.Iters == 0 {
		c.Iters = 5000
		if c.Lat {
			c.Iters = 1000
		}
	}
}
