package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// latTests are the latency tests both roles run against the fakes and
// each other.
func latTests() []fakeTest {
	return []fakeTest{
		{op: "send", size: 2, iters: 200, qps: 1},
		{op: "write", size: 2, iters: 200, qps: 1},
		{op: "read", size: 2, iters: 200, qps: 1},
		{op: "atomic", size: 8, iters: 200, qps: 1},
		{op: "atomic", size: 8, iters: 100, qps: 1, cmpSwap: true},
		{op: "send", size: 8192, iters: 20, qps: 1, all: true},
		{op: "write", size: 8192, iters: 20, qps: 1, all: true},
		{op: "read", size: 8192, iters: 20, qps: 1, all: true},
	}
}

func (ft fakeTest) latConfig() PerftestConfig {
	cfg := ft.config()
	cfg.Lat = true
	return cfg
}

// TestPerftestLatClientServer: our latency client and server, each test.
func TestPerftestLatClientServer(t *testing.T) {
	for _, ft := range latTests() {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestPair(t, ft.latConfig(), memlink.Faults{})
			checkLatPair(t, ft, run, sv)
		})
	}
}

func checkLatPair(t *testing.T, ft fakeTest, run, sv PerftestOutcome) {
	t.Helper()
	sizes := ft.sizes()
	if len(run.Lat) != len(sizes) {
		t.Fatalf("client: %d lines for %d sizes", len(run.Lat), len(sizes))
	}
	for i, l := range run.Lat {
		if l.Bytes != uint64(sizes[i]) || l.Iters != uint64(ft.iters) || l.TMin <= 0 || l.TTypical < l.TMin || l.TMax < l.TTypical || l.T999 < l.T99 {
			t.Fatalf("client line %d: %+v", i, l)
		}
	}
	if ft.op == "read" || ft.op == "atomic" {
		if len(sv.Lat) != 0 {
			t.Fatalf("a %s server printed %+v", ft.op, sv.Lat)
		}
		return
	}
	if len(sv.Lat) != len(sizes) {
		t.Fatalf("server: %d lines for %d sizes", len(sv.Lat), len(sizes))
	}
	t.Logf("client %+v\nserver %+v", run.Lat[0], sv.Lat[0])
}

// fakeLat plays perftest 6.06's ib_<op>_lat [-a] [-A], server or client,
// on device d over nc, written from the C sources (the *_lat.c mains,
// run_iter_lat_send, run_iter_lat_write, run_iter_lat) rather than from
// our implementation. It returns the rows it would print (none for a
// read or atomic server). One liberty: after ib_write_lat's loop it keeps
// its queue pair answering until our side closes the socket, where
// perftest exits at once (and a lost last ACK then fails its peer, as
// with ibv_rc_pingpong), so that the lossy test is not about that race.
func fakeLat(ctx context.Context, d *device.Device, nc net.Conn, server bool, ft fakeTest) ([]PerftestLatLine, error) {
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	f := &fakePT{d: d, nc: nc, server: server}
	if err := f.prelude(); err != nil {
		return nil, err
	}
	sizes := ft.sizes()
	q, err := newFakeQPs(d, 1, sizes[len(sizes)-1])
	if err != nil {
		return nil, err
	}
	defer q.close()
	me := q.me[0]
	if ft.op != "send" {
		if _, err := f.key("first key", me); err != nil {
			return nil, err
		}
	}
	them, err := f.key("keys", me)
	if err != nil {
		return nil, err
	}
	if err := q.connect(ctx, []perftest.Dest{them}); err != nil {
		return nil, err
	}
	again := func() error {
		t, err := f.key("keys again", me)
		if err == nil && t != them {
			err = fmt.Errorf("fake perftest: keys again %+v, first %+v", t, them)
		}
		return err
	}
	if ft.op == "send" {
		if _, err := f.key("after connect", me); err != nil {
			return nil, err
		}
		if err := again(); err != nil {
			return nil, err
		}
	} else {
		if err := again(); err != nil {
			return nil, err
		}
		if _, err := f.key("after RTR", me); err != nil {
			return nil, err
		}
		if server && ft.op != "write" {
			return nil, f.closeConn(me) // waits there while the client runs
		}
	}
	l := &fakeLatLoop{q: q, ft: ft, server: server, them: them, posted: make([]time.Duration, ft.iters)}
	var lines []PerftestLatLine
	for _, size := range sizes {
		if ft.op == "send" {
			if err := l.postRecvs(size); err != nil {
				return nil, err
			}
			if _, err := f.key("receives posted", me); err != nil {
				return nil, err
			}
		}
		if err := l.run(ctx, size); err != nil {
			return nil, err
		}
		lines = append(lines, ptLatReport(size, l.posted, ptRTTFactor(ft.op)))
	}
	if ft.op != "write" {
		return lines, f.closeConn(me)
	}
	// ib_write_lat: nothing more on the socket either way.
	_ = nc.(*net.TCPConn).CloseWrite()
	r := startRead(&perftest.Conn{C: nc, Ctx: ctx}, "after the test", 1, 0)
	for {
		done, err := r.poll()
		if done {
			return nil, fmt.Errorf("fake perftest: the peer sent %q after ib_write_lat's test", r.buf)
		}
		if errors.Is(err, perftest.ErrPeerClosed) {
			return lines, nil
		}
		if err != nil {
			return nil, err
		}
		_, _ = d.Progress()
	}
}

// fakeLatLoop is the fake's loop of one size.
type fakeLatLoop struct {
	q      *fakeQPs
	ft     fakeTest
	server bool
	them   perftest.Dest
	posted []time.Duration
	start  time.Time
	// receives posted and completed, sends completed
	rposted, rdone, sdone int
	size                  int
}

// postRecvs is ctx_set_recv_wqes: rx_depth receives, at most -n.
func (l *fakeLatLoop) postRecvs(size int) error {
	l.size, l.rposted, l.rdone = size, 0, 0
	for ; l.rposted < min(512, l.ft.iters); l.rposted++ {
		if err := l.q.qps[0].PostRecv(&verbs.RecvWR{SGL: l.sge(0, size)}); err != nil {
			return err
		}
	}
	return nil
}

func (l *fakeLatLoop) sge(off, n int) []mr.SGE {
	return []mr.SGE{{Addr: l.q.buf.Addr() + uint64(off), Length: uint32(n), LKey: l.q.buf.LKey()}}
}

// poll runs the device and takes its completions; receives are posted
// again while fewer than -n have been.
func (l *fakeLatLoop) poll(ctx context.Context) error {
	q := l.q
	_, _ = q.d.Progress()
	for _, e := range q.cs[:q.scq.Poll(q.cs)] {
		if e.Status != verbs.Success {
			return fmt.Errorf("fake perftest: %s completed with %v", l.ft.op, e.Status)
		}
		l.sdone++
	}
	for _, e := range q.cs[:q.rcq.Poll(q.cs)] {
		if e.Status != verbs.Success {
			return fmt.Errorf("fake perftest: receive completed with %v", e.Status)
		}
		l.rdone++
		if l.rposted < l.ft.iters {
			if err := q.qps[0].PostRecv(&verbs.RecvWR{SGL: l.sge(0, l.size)}); err != nil {
				return err
			}
			l.rposted++
		}
	}
	return ctx.Err()
}

func (l *fakeLatLoop) post(i, size int) error {
	l.posted[i] = time.Since(l.start)
	wr := verbs.SendWR{Flags: verbs.Signaled, SGL: l.sge(0, size), RemoteAddr: l.them.VA, RKey: l.them.RKey}
	switch {
	case l.ft.op == "send":
		wr.Op = verbs.OpSend
	case l.ft.op == "write":
		wr.Op = verbs.OpWrite
	case l.ft.op == "read":
		wr.Op = verbs.OpRead
	case l.ft.cmpSwap:
		wr.Op, wr.SGL = verbs.OpCmpSwap, l.sge(0, 8)
	default:
		wr.Op, wr.CompareAdd, wr.SGL = verbs.OpFetchAdd, 1, l.sge(0, 8)
	}
	return l.q.qps[0].PostSend(&wr)
}

func (l *fakeLatLoop) until(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := l.poll(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (l *fakeLatLoop) run(ctx context.Context, size int) error {
	n := l.ft.iters
	l.start, l.sdone = time.Now(), 0
	switch l.ft.op {
	case "send": // run_iter_lat_send: the client sends first
		for scnt, rcnt := 0, 0; scnt < n || rcnt < n; {
			if rcnt < n && !(scnt < 1 && !l.server) {
				rcnt++
				if err := l.until(ctx, func() bool { return l.rdone >= rcnt }); err != nil {
					return err
				}
			}
			if scnt < n {
				if err := l.post(scnt, size); err != nil {
					return err
				}
				scnt++
			}
		}
		return l.until(ctx, func() bool { return l.sdone >= n })
	case "write": // run_iter_lat_write: the server writes first
		post, poll := size-1, l.q.region+size-1
		for scnt, rcnt := 0, 0; scnt < n || l.sdone < n || rcnt < n; {
			if rcnt < n && !(scnt < 1 && l.server) {
				rcnt++
				if err := l.until(ctx, func() bool { return l.q.mem[poll] == byte(rcnt) }); err != nil {
					return err
				}
			}
			if scnt < n {
				scnt++
				l.q.mem[post] = byte(scnt)
				if err := l.post(scnt-1, size); err != nil {
					return err
				}
			}
			if l.sdone < n {
				want := l.sdone + 1
				if err := l.until(ctx, func() bool { return l.sdone >= want }); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range n { // run_iter_lat: one read or atomic at a time
		if err := l.post(i, size); err != nil {
			return err
		}
		if err := l.until(ctx, func() bool { return l.sdone > i }); err != nil {
			return err
		}
	}
	return nil
}

// TestRunPerftestLatAgainstFake: our client against perftest's latency
// servers as the C sources behave.
func TestRunPerftestLatAgainstFake(t *testing.T) {
	for _, ft := range latTests() {
		t.Run(ft.String(), func(t *testing.T) {
			a, b, ln, ctx := ptSetup(t, 30*time.Second)
			type out struct {
				lines []PerftestLatLine
				err   error
			}
			srv := make(chan out, 1)
			go func() {
				nc, err := ln.Accept()
				if err != nil {
					srv <- out{err: err}
					return
				}
				defer nc.Close()
				lines, err := fakeLat(ctx, b, nc, true, ft)
				srv <- out{lines, err}
			}()
			run, err := RunPerftest(ctx, OnDevice(a), ln.Addr().String(), ft.latConfig())
			s := <-srv
			if err != nil || s.err != nil {
				t.Fatalf("client: %v; fake server: %v", err, s.err)
			}
			checkLatPair(t, ft, run, PerftestOutcome{Lat: s.lines})
		})
	}
}

// TestServePerftestLatAgainstFake: perftest's latency clients, as the C
// sources behave, against our server.
func TestServePerftestLatAgainstFake(t *testing.T) {
	for _, ft := range latTests() {
		t.Run(ft.String(), func(t *testing.T) {
			a, b, ln, ctx := ptSetup(t, 30*time.Second)
			srv := serveAsync(ctx, b, ln, ft.latConfig())
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			lines, err := fakeLat(ctx, a, nc, false, ft)
			s := <-srv
			if err != nil || s.err != nil {
				t.Fatalf("fake client: %v; server: %v", err, s.err)
			}
			checkLatPair(t, ft, PerftestOutcome{Lat: lines}, s.sv)
		})
	}
}

// TestPerftestLatLossy: both roles over a link that loses, reorders and
// duplicates frames.
func TestPerftestLatLossy(t *testing.T) {
	faults := memlink.Faults{Loss: 0.03, Reorder: 0.02, Duplicate: 0.02}
	for _, ft := range latTests()[:5] {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestPair(t, ft.latConfig(), faults)
			checkLatPair(t, ft, run, sv)
		})
	}
}

// TestPerftestLatReport: print_report_lat's arithmetic on gaps whose
// figures are worked out by hand: 8 posts 2 µs apart but for one gap of
// 5 µs and one of 40 µs, a round trip each (halved).
func TestPerftestLatReport(t *testing.T) {
	us := time.Microsecond
	gaps := []time.Duration{2 * us, 2 * us, 5 * us, 2 * us, 40 * us, 2 * us, 4 * us}
	posted := make([]time.Duration, len(gaps)+1)
	for i, g := range gaps {
		posted[i+1] = posted[i] + g
	}
	l := ptLatReport(64, posted, 2)
	// Sorted halves: 1 1 1 1 2 2.5 20; the 2 largest left out: 1 1 1 1 2.
	// The median of 5: the third. The mean: 6/5. The deviation, with
	// perftest's int temporaries: int(1.2-1)=0 four times, int(1.2-2)=0:
	// 0. The 99th and 99.9th percentile: index ceil(5*0.99) = 5: 2.5.
	want := PerftestLatLine{Bytes: 64, Iters: 8, TMin: 1, TMax: 2.5, TTypical: 1, TAvg: 1.2, TStdev: 0, T99: 2.5, T999: 2.5}
	if math.Abs(l.TAvg-want.TAvg) > 1e-9 {
		t.Fatalf("t_avg %v, want %v", l.TAvg, want.TAvg)
	}
	l.TAvg = want.TAvg
	if l != want {
		t.Fatalf("%+v\nwant %+v", l, want)
	}
	// An even count kept: the mean of the middle two (get_median).
	l = ptLatReport(8, posted[:7], 1) // gaps 2 2 5 2 40 2 → kept 2 2 2 2: median 2
	if l.TTypical != 2 || l.TMin != 2 || l.TMax != 5 {
		t.Fatalf("%+v", l)
	}
}

// TestPrintPerftestLat: the latency table as perftest prints it.
func TestPrintPerftestLat(t *testing.T) {
	var b bytes.Buffer
	PrintPerftestLat(&b, PerftestTitle("write", false, true), 1024, []PerftestLatLine{{Bytes: 2, Iters: 1000, TMin: 1.23, TMax: 9.87, TTypical: 1.5, TAvg: 1.61, TStdev: 0.4, T99: 3.2, T999: 9.1}})
	want := ptResultLine + "                    RDMA_Write Latency Test\n Connection type : RC\n Number of qps   : 1\n Mtu             : 1024[B]\n" + ptResultLine +
		" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n" +
		" 2       1000          1.23           9.87         1.50     \t       1.61        \t0.40   \t\t3.20    \t\t9.10   \n" + ptResultLine
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// TestPerftestLatAllocs: the latency loops allocate nothing per
// iteration (both sides run in this process; what grows with -n is
// counted).
func TestPerftestLatAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	for _, op := range []string{"send", "write", "read"} {
		t.Run(op, func(t *testing.T) {
			mallocs := func(iters int) uint64 {
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				runPerftestPair(t, PerftestConfig{Op: op, Size: 64, Iters: iters, Lat: true}, memlink.Faults{})
				runtime.ReadMemStats(&m1)
				return m1.Mallocs - m0.Mallocs
			}
			mallocs(2000) // warm up
			few, many := mallocs(200), mallocs(2000)
			if many > few+400 {
				t.Fatalf("%d allocations for 2000 round trips, %d for 200: the loop allocates per iteration", many, few)
			}
			t.Logf("%d allocations for 200 round trips, %d for 2000", few, many)
		})
	}
}
