package perf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/perftest"
)

// ptKeyRE is a key message as ethernet_write_keys sends it: sprintf of
// KEY_PRINT_FMT_GID into char[KEY_MSG_SIZE_GID], 107 characters and the
// NUL. The fakes below hold every key and barrier message to it.
var ptKeyRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{6}:[0-9a-f]{6}:[0-9a-f]{8}:[0-9a-f]{16}:([0-9a-f]{2}:){16}[0-9a-f]{8}:\x00$`)

// fakePT is one end of perftest 6.06's exchange, written from the C
// sources (perftest_communication.c and the ib_*_bw mains) rather than
// from our implementation: the client writes each message and then reads
// the peer's of the same size, the server reads first. It checks every
// message the other side sends where perftest fixes its bytes, and that
// the stream ends exactly after the peer's "done": a message of a wrong
// size shifts what follows and fails the run.
type fakePT struct {
	d      *device.Device
	nc     net.Conn
	server bool
	poll   func() error // runs with the device while a step waits
	mutate string       // a deliberate mistake, for the tests that must fail
}

// ptRead is a message a fake reads while it polls its device, without a
// goroutine: with the fake and the side under test both polling in one
// process, a goroutine blocked in read() would wait for a processor until
// the scheduler next looks at the network, milliseconds later.
type ptRead struct {
	c        *perftest.Conn
	what     string
	buf      []byte
	have     int
	deadline time.Time
	rc       syscall.RawConn // nil: a goroutine reads into ch
	fn       func(uintptr) bool
	n        int   // of the last read(2)
	err      error // of the last read(2)
	ch       <-chan perftest.Msg
	done     bool
}

// startRead starts reading the peer's next message of n bytes, giving up
// after to (0: only when the context ends).
func startRead(c *perftest.Conn, what string, n int, to time.Duration) *ptRead {
	r := &ptRead{c: c, what: what, buf: make([]byte, n)}
	if to > 0 {
		r.deadline = time.Now().Add(to)
	}
	if sc, ok := c.C.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			r.rc, r.fn = rc, r.readSome
			return r
		}
	}
	r.ch = c.ReadAsync(what, n, to)
	return r
}

func (r *ptRead) readSome(fd uintptr) bool {
	r.n, r.err = syscall.Read(int(fd), r.buf[r.have:])
	return true // never wait
}

// poll takes what has arrived, without blocking, and says whether the
// message is complete. It does not allocate.
func (r *ptRead) poll() (bool, error) {
	if r.done {
		return true, nil
	}
	if r.rc == nil {
		select {
		case m := <-r.ch:
			r.buf, r.done = m.B, m.Err == nil
			return r.done, m.Err
		default:
			return false, nil
		}
	}
	if err := r.rc.Read(r.fn); err != nil { // the deadline the context's end sets
		return false, r.c.Fail(r.what, err)
	}
	switch {
	case r.err == syscall.EAGAIN || r.err == syscall.EINTR:
		if !r.deadline.IsZero() && time.Now().After(r.deadline) {
			return false, r.c.Fail(r.what, os.ErrDeadlineExceeded)
		}
		return false, nil
	case r.err != nil:
		return false, r.c.Fail(r.what, r.err)
	case r.n == 0:
		return false, r.c.Fail(r.what, io.ErrUnexpectedEOF)
	}
	r.have += r.n
	r.done = r.have == len(r.buf)
	return r.done, nil
}

// step exchanges one message while the device runs.
func (f *fakePT) step(what string, mine []byte) ([]byte, error) {
	if !f.server {
		if _, err := f.nc.Write(mine); err != nil {
			return nil, fmt.Errorf("fake perftest (%s): %w", what, err)
		}
	}
	c := &perftest.Conn{C: f.nc, Ctx: context.Background(), Server: f.server}
	r := startRead(c, what, len(mine), 0) // the connection's deadline bounds it
	for {
		done, err := r.poll()
		if err != nil {
			return nil, fmt.Errorf("fake perftest: %w", err)
		}
		if done {
			break
		}
		_, _ = f.d.Progress()
		if f.poll != nil {
			if err := f.poll(); err != nil {
				return nil, err
			}
		}
	}
	if f.server {
		if _, err := f.nc.Write(mine); err != nil {
			return nil, fmt.Errorf("fake perftest (%s): %w", what, err)
		}
	}
	return r.buf, nil
}

// key is ctx_hand_shake: my key message for the peer's, which must be one.
func (f *fakePT) key(what string, me perftest.Dest) (perftest.Dest, error) {
	msg := me.Marshal()
	if f.mutate == "key107" {
		msg = msg[:perftest.KeyMsgSize-1]
	}
	rem, err := f.step(what, msg)
	if err != nil {
		return perftest.Dest{}, err
	}
	if !ptKeyRE.Match(rem) {
		return perftest.Dest{}, fmt.Errorf("fake perftest (%s): not a key message: %q", what, rem)
	}
	return perftest.ParseDest(rem)
}

// prelude is exchange_versions, check_sys_data and check_mtu, offering
// IBV_MTU_1024.
func (f *fakePT) prelude() error {
	v, err := f.step("versions", perftest.VersionMsg("6.06"))
	if err != nil {
		return err
	}
	if !bytes.Equal(v, perftest.VersionMsg(PerftestVersion)) {
		return fmt.Errorf("fake perftest: version message %q", v)
	}
	for _, x := range []uint32{4096, 64} {
		r, err := f.step("sys data", binary.BigEndian.AppendUint32(nil, x))
		if err != nil {
			return err
		}
		if binary.BigEndian.Uint32(r) != x {
			return fmt.Errorf("fake perftest: sys data %x, want %d", r, x)
		}
	}
	mtu := []byte("3\x00")
	if f.mutate == "mtu4" {
		mtu = []byte("3\x00\x00\x00") // what a peer older than 5.31 expects
	}
	m, err := f.step("MTU", mtu)
	if err != nil {
		return err
	}
	if m[0] < '1' || m[0] > '5' || m[1] != 0 {
		return fmt.Errorf("fake perftest: MTU message %q", m)
	}
	return nil
}

// closeConn is ctx_close_connection: a hand-shake, "done" both ways, and
// nothing after the peer's.
func (f *fakePT) closeConn(me perftest.Dest) error {
	if _, err := f.key("close", me); err != nil {
		return err
	}
	if _, err := f.nc.Write([]byte(perftest.Done)); err != nil {
		return err
	}
	_ = f.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var rest bytes.Buffer
	if _, err := io.Copy(&rest, f.nc); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		return fmt.Errorf("fake perftest: after close: %w (read %q)", err, rest.Bytes())
	}
	if rest.String() != perftest.Done {
		return fmt.Errorf("fake perftest: the stream ended with %q, want exactly %q", rest.Bytes(), perftest.Done)
	}
	return nil
}

// fakeQPs are a perftest side's queue pairs: each with its own receive
// queue, its buffer handing QP i the region at (QPs + i) × region, as
// set_up_connection does.
type fakeQPs struct {
	d        *device.Device
	scq, rcq *verbs.CQ
	qps      []*rc.QP
	rqs      []*verbs.RecvQueue
	buf      *mr.Region
	mem      []byte // buf's memory
	region   int
	me       []perftest.Dest
	idx      map[uint32]int
	cs       []verbs.Completion
}

func newFakeQPs(d *device.Device, n, maxSize int) (*fakeQPs, error) {
	region := max(maxSize, 4096)
	q := &fakeQPs{d: d, scq: verbs.NewCQ(8192), rcq: verbs.NewCQ(8192), region: region, idx: map[uint32]int{}, cs: make([]verbs.Completion, 64)}
	var err error
	q.mem = make([]byte, 2*n*region)
	if q.buf, err = d.MRs().Register(q.mem, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		return nil, err
	}
	gid, _ := d.GID(netip.Addr{})
	for i := 0; i < n; i++ {
		rq := verbs.NewRecvQueue(1024)
		qp, err := d.NewRC(device.QPConfig{SendCQ: q.scq, RecvCQ: q.rcq, RQ: rq, SQDepth: 1024}, mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic)
		if err != nil {
			return nil, err
		}
		q.qps, q.rqs = append(q.qps, qp), append(q.rqs, rq)
		q.idx[qp.QPN()] = i
		q.me = append(q.me, perftest.Dest{OutReads: 128, QPInfo: fabric.QPInfo{QPN: qp.QPN(), PSN: uint32(0x10000*i+0x1234) & psn.Mask, GID: gid}, RKey: q.buf.RKey(),
			VA: q.buf.Addr() + uint64((n+i)*region)})
	}
	return q, nil
}

func (q *fakeQPs) close() {
	for _, qp := range q.qps {
		q.d.Destroy(qp)
	}
	_ = q.d.MRs().Deregister(q.buf)
}

// connect is ctx_connect, with the peer's out_reads as initiator depth.
func (q *fakeQPs) connect(ctx context.Context, theirs []perftest.Dest) error {
	for i, qp := range q.qps {
		t := theirs[i]
		rd := uint8(min(t.OutReads, 128))
		if err := q.d.ConnectRC(ctx, qp, q.me[i].PSN, device.Remote{QPN: t.QPN, PSN: t.PSN, GID: t.GID}, device.ConnectOptions{PathMTU: 1024, RdAtomic: rd}); err != nil {
			return err
		}
	}
	return nil
}

// sendAll is run_iter_bw at one size, plainly: iters requests on each QP.
func (q *fakeQPs) sendAll(ctx context.Context, op string, cmpSwap bool, size, iters int, theirs []perftest.Dest) error {
	n := len(q.qps)
	posted, done := make([]int, n), make([]int, n)
	length := size
	if op == "atomic" {
		length = 8
	}
	sge := []mr.SGE{{Addr: q.buf.Addr(), Length: uint32(length), LKey: q.buf.LKey()}}
	total := 0
	for total < n*iters {
		for i, qp := range q.qps {
			for posted[i] < iters && posted[i]-done[i] < 16 {
				wr := verbs.SendWR{Flags: verbs.Signaled, SGL: sge, RemoteAddr: theirs[i].VA, RKey: theirs[i].RKey}
				switch {
				case op == "write":
					wr.Op = verbs.OpWrite
				case op == "read":
					wr.Op = verbs.OpRead
				case op == "send":
					wr.Op = verbs.OpSend
				case cmpSwap:
					wr.Op, wr.Swap = verbs.OpCmpSwap, 7
				default:
					wr.Op, wr.CompareAdd = verbs.OpFetchAdd, 1
				}
				if err := qp.PostSend(&wr); err != nil {
					return err
				}
				posted[i]++
			}
		}
		_, _ = q.d.Progress()
		for _, e := range q.cs[:q.scq.Poll(q.cs)] {
			if e.Status != verbs.Success {
				return fmt.Errorf("fake perftest: %s of %d bytes completed with %v", op, size, e.Status)
			}
			done[q.idx[e.QPN]]++
			total++
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// fakeTest is a test as both fakes' command lines give it.
type fakeTest struct {
	op      string
	cmpSwap bool
	size    int // with all: the largest
	iters   int
	qps     int
	all     bool
}

func (ft fakeTest) sizes() []int {
	if !ft.all {
		return []int{ft.size}
	}
	var s []int
	for n := 2; n <= ft.size; n *= 2 {
		s = append(s, n)
	}
	return s
}

func (ft fakeTest) config() PerftestConfig {
	cfg := PerftestConfig{Op: ft.op, CmpSwap: ft.cmpSwap, Iters: ft.iters, QPs: ft.qps, All: ft.all}
	if ft.all {
		cfg.allMax = ft.size
	} else if ft.op != "atomic" {
		cfg.Size = ft.size
	}
	return cfg
}

// fakeReport is the report the fake client sends: values no run would
// measure, so that the server's printing them shows they came across.
func fakeReport(ft fakeTest) perftest.Report {
	s := ft.sizes()
	return perftest.Report{Size: uint64(s[len(s)-1]), Iters: uint64(ft.iters * ft.qps), BWPeak: 1234.5678, BWAvg: 1000.25, MsgRate: 0.123456}
}

// fakePerftestClient plays ib_<op>_bw -F -x N [-a] [-q] [-A] SERVER against
// the server at addr, with QPs on device d. It returns the report it sent
// (write, read, atomic).
func fakePerftestClient(ctx context.Context, d *device.Device, addr string, ft fakeTest, mutate string) (perftest.Report, error) {
	var rep perftest.Report
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return rep, err
	}
	defer nc.Close()
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	f := &fakePT{d: d, nc: nc, mutate: mutate}
	if err := f.prelude(); err != nil {
		return rep, err
	}
	sizes := ft.sizes()
	q, err := newFakeQPs(d, ft.qps, sizes[len(sizes)-1])
	if err != nil {
		return rep, err
	}
	defer q.close()
	theirs := make([]perftest.Dest, ft.qps)
	for i := range theirs {
		if theirs[i], err = f.key("keys", q.me[i]); err != nil {
			return rep, err
		}
		if theirs[i].OutReads != ptOutReads || !theirs[i].GID.Is4In6() {
			return rep, fmt.Errorf("fake perftest: server QP %+v", theirs[i])
		}
	}
	if err := q.connect(ctx, theirs); err != nil {
		return rep, err
	}
	again := func() error {
		for i := range theirs {
			t, err := f.key("keys again", q.me[i])
			if err != nil {
				return err
			}
			if t != theirs[i] {
				return fmt.Errorf("fake perftest: keys again %+v, first %+v", t, theirs[i])
			}
		}
		return nil
	}
	if ft.op == "send" {
		if _, err := f.key("after connect", q.me[0]); err != nil {
			return rep, err
		}
		if err := again(); err != nil {
			return rep, err
		}
		for _, size := range sizes {
			if _, err := f.key("receives posted", q.me[0]); err != nil {
				return rep, err
			}
			if mutate == "late" {
				time.Sleep(ptLateStart) // a client slow to start sending
			}
			if err := q.sendAll(ctx, ft.op, false, size, ft.iters, theirs); err != nil {
				return rep, err
			}
			if ft.all {
				if _, err := f.key("after size", q.me[0]); err != nil {
					return rep, err
				}
			}
		}
		return rep, f.closeConn(q.me[0])
	}
	if err := again(); err != nil {
		return rep, err
	}
	if _, err := f.key("after RTR", q.me[0]); err != nil {
		return rep, err
	}
	for _, size := range sizes { // nothing exchanged between sizes
		if err := q.sendAll(ctx, ft.op, ft.cmpSwap, size, ft.iters, theirs); err != nil {
			return rep, err
		}
	}
	if _, err := f.key("end of test", q.me[0]); err != nil {
		return rep, err
	}
	rep = fakeReport(ft)
	for i, m := range rep.Messages(6.06) {
		if mutate == "iters4" && i == 1 {
			m = m[4:] // hton_int: what a peer older than 5.33 sends
		}
		r, err := f.step("BW report", m)
		if err != nil {
			return rep, err
		}
		if !bytes.Equal(r, make([]byte, len(m))) {
			return rep, fmt.Errorf("fake perftest: the server's report field %d is %x (perftest's server sends its unset report; ours zeros)", i, r)
		}
	}
	return rep, f.closeConn(q.me[0])
}

// fakePerftestServer plays perftest 6.06's ib_<op>_bw [-a] [-q] server on
// device d: it returns the report the client sent (write, read, atomic)
// and the messages it received at each size (send), each QP's receive
// queue holding exactly iters receives as ctx_set_recv_wqes and
// run_iter_bw_server keep it.
func fakePerftestServer(ctx context.Context, d *device.Device, ln net.Listener, ft fakeTest) (perftest.Report, []int, error) {
	var rep perftest.Report
	nc, err := ln.Accept()
	if err != nil {
		return rep, nil, err
	}
	defer nc.Close()
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	f := &fakePT{d: d, nc: nc, server: true}
	if err := f.prelude(); err != nil {
		return rep, nil, err
	}
	sizes := ft.sizes()
	q, err := newFakeQPs(d, ft.qps, sizes[len(sizes)-1])
	if err != nil {
		return rep, nil, err
	}
	defer q.close()
	theirs := make([]perftest.Dest, ft.qps)
	for i := range theirs {
		if theirs[i], err = f.key("keys", q.me[i]); err != nil {
			return rep, nil, err
		}
	}
	if err := q.connect(ctx, theirs); err != nil {
		return rep, nil, err
	}
	again := func() error {
		for i := range theirs {
			if _, err := f.key("keys again", q.me[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if ft.op != "send" {
		if err := again(); err != nil {
			return rep, nil, err
		}
		for _, what := range []string{"after RTR", "end of test"} {
			if _, err := f.key(what, q.me[0]); err != nil {
				return rep, nil, err
			}
		}
		var fs [5][]byte
		for i := range fs {
			if fs[i], err = f.step("BW report", make([]byte, 8)); err != nil {
				return rep, nil, err
			}
		}
		u := func(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
		rep = perftest.Report{Size: u(fs[0]), Iters: u(fs[1]), BWPeak: math.Float64frombits(u(fs[2])), BWAvg: math.Float64frombits(u(fs[3])), MsgRate: math.Float64frombits(u(fs[4]))}
		return rep, nil, f.closeConn(q.me[0])
	}
	if _, err := f.key("after connect", q.me[0]); err != nil {
		return rep, nil, err
	}
	if err := again(); err != nil {
		return rep, nil, err
	}
	var got []int
	for _, size := range sizes {
		rx := min(512, ft.iters) // DEF_RX_SEND, at most -n
		posted, rcnt := make([]int, ft.qps), make([]int, ft.qps)
		sge := []mr.SGE{{Addr: q.buf.Addr(), Length: uint32(size), LKey: q.buf.LKey()}}
		for i, qp := range q.qps {
			for ; posted[i] < rx; posted[i]++ {
				if err := qp.PostRecv(&verbs.RecvWR{SGL: sge}); err != nil {
					return rep, nil, err
				}
			}
		}
		total := 0
		f.poll = func() error {
			for _, e := range q.cs[:q.rcq.Poll(q.cs)] {
				if e.Status != verbs.Success {
					return fmt.Errorf("fake perftest: receive completed with %v", e.Status)
				}
				i := q.idx[e.QPN]
				rcnt[i]++
				total++
				if posted[i] < ft.iters {
					if err := q.qps[i].PostRecv(&verbs.RecvWR{SGL: sge}); err != nil {
						return err
					}
					posted[i]++
				}
			}
			return nil
		}
		if _, err := f.key("receives posted", q.me[0]); err != nil {
			return rep, nil, err
		}
		for total < ft.iters*ft.qps {
			_, _ = d.Progress()
			if err := f.poll(); err != nil {
				return rep, nil, err
			}
			if ctx.Err() != nil {
				return rep, nil, fmt.Errorf("fake perftest: %d-byte sends: received %d of %d (%v)", size, total, ft.iters*ft.qps, rcnt)
			}
		}
		got = append(got, total)
		if ft.all {
			if _, err := f.key("after size", q.me[0]); err != nil {
				return rep, nil, err
			}
		}
	}
	return rep, got, f.closeConn(q.me[0])
}

// ptTests are the tests both roles run against the fakes and each other.
func ptTests() []fakeTest {
	var out []fakeTest
	for _, qps := range []int{1, 4} {
		for _, op := range []string{"write", "read", "send", "atomic"} {
			out = append(out, fakeTest{op: op, size: 4096, iters: 60, qps: qps})
			if op != "atomic" {
				out = append(out, fakeTest{op: op, size: 8192, iters: 12, qps: qps, all: true})
			}
		}
		out = append(out, fakeTest{op: "atomic", cmpSwap: true, iters: 60, qps: qps})
	}
	for i := range out {
		if out[i].op == "atomic" {
			out[i].size = 8
		}
	}
	return out
}

func (ft fakeTest) String() string {
	s := fmt.Sprintf("%s-q%d", ft.op, ft.qps)
	if ft.cmpSwap {
		s += "-cmpswap"
	}
	if ft.all {
		s += "-all"
	}
	return s
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestRunPerftestAgainstFakeServer: our client against a perftest server
// written from the C sources, for every test, -q 1 and 4, with and
// without -a.
func TestRunPerftestAgainstFakeServer(t *testing.T) {
	for _, ft := range ptTests() {
		t.Run(ft.String(), func(t *testing.T) {
			a, b, ln, ctx := ptSetup(t, 30*time.Second)
			type out struct {
				rep perftest.Report
				got []int
				err error
			}
			srv := make(chan out, 1)
			go func() {
				rep, got, err := fakePerftestServer(ctx, b, ln, ft)
				srv <- out{rep, got, err}
			}()
			run, err := RunPerftest(ctx, OnDevice(a), ln.Addr().String(), ft.config())
			s := <-srv
			if err != nil || s.err != nil {
				t.Fatalf("client: %v; server: %v", err, s.err)
			}
			if run.PeerVersion != "6.06" || len(run.Peer) != ft.qps || run.Peer[0].OutReads != 128 || run.MTU != 1024 {
				t.Fatalf("server as seen: %+v", run)
			}
			sizes := ft.sizes()
			if len(run.Lines) != len(sizes) || len(run.Results) != len(sizes) {
				t.Fatalf("%d lines for %d sizes", len(run.Lines), len(sizes))
			}
			for i, l := range run.Lines {
				if l.Bytes != uint64(sizes[i]) || l.Iters != uint64(ft.iters*ft.qps) || l.BWAvg <= 0 || l.BWPeak < l.BWAvg || l.MsgRate <= 0 {
					t.Fatalf("line %d: %+v", i, l)
				}
			}
			last := run.Lines[len(run.Lines)-1]
			if ft.op == "send" {
				for i, n := range s.got {
					if n != ft.iters*ft.qps {
						t.Fatalf("size %d: the server received %d, want %d", sizes[i], n, ft.iters*ft.qps)
					}
				}
				if len(s.got) != len(sizes) {
					t.Fatalf("the server counted %d sizes, want %d", len(s.got), len(sizes))
				}
				return
			}
			want := perftest.Report{Size: last.Bytes, Iters: last.Iters, BWPeak: last.BWPeak, BWAvg: last.BWAvg, MsgRate: last.MsgRate}
			if s.rep != want {
				t.Fatalf("report %+v, want %+v", s.rep, want)
			}
		})
	}
}

// TestServePerftestAgainstFakeClient: our server against a perftest
// client written from the C sources.
func TestServePerftestAgainstFakeClient(t *testing.T) {
	for _, ft := range ptTests() {
		t.Run(ft.String(), func(t *testing.T) {
			a, b, ln, ctx := ptSetup(t, 30*time.Second)
			srv := serveAsync(ctx, b, ln, ft.config())
			rep, err := fakePerftestClient(ctx, a, ln.Addr().String(), ft, "")
			s := <-srv
			if err != nil || s.err != nil {
				t.Fatalf("client: %v; server: %v", err, s.err)
			}
			sv := s.sv
			if sv.PeerVersion != "6.06" || len(sv.Peer) != ft.qps || sv.MTU != 1024 || len(sv.Results) != len(sv.Lines) {
				t.Fatalf("served: %+v", sv)
			}
			if ft.op != "send" {
				want := PerftestLine{Bytes: rep.Size, Iters: rep.Iters, BWPeak: rep.BWPeak, BWAvg: rep.BWAvg, MsgRate: rep.MsgRate}
				if len(sv.Lines) != 1 || sv.Lines[0] != want {
					t.Fatalf("printed %+v, want the client's report %+v", sv.Lines, want)
				}
				return
			}
			sizes := ft.sizes()
			if len(sv.Lines) != len(sizes) {
				t.Fatalf("%d lines for %d sizes", len(sv.Lines), len(sizes))
			}
			for i, l := range sv.Lines {
				if l.Bytes != uint64(sizes[i]) || l.Iters != uint64(ft.iters*ft.qps) || l.BWPeak != 0 || l.BWAvg <= 0 || sv.Results[i].Received != ft.iters*ft.qps {
					t.Fatalf("line %d: %+v (%+v)", i, l, sv.Results[i])
				}
			}
		})
	}
}

// TestServePerftestWrongSizes: a client whose messages are the wrong size
// somewhere (as perftest's of another version would be) makes the run
// fail rather than pass.
func TestServePerftestWrongSizes(t *testing.T) {
	for _, m := range []string{"mtu4", "key107", "iters4"} {
		t.Run(m, func(t *testing.T) {
			a, b, ln, ctx := ptSetup(t, 1500*time.Millisecond)
			ft := fakeTest{op: "write", size: 4096, iters: 20, qps: 1}
			srv := make(chan error, 1)
			go func() {
				_, err := ServePerftest(ctx, OnDevice(b), ln, ft.config())
				srv <- err
			}()
			_, err := fakePerftestClient(ctx, a, ln.Addr().String(), ft, m)
			serr := <-srv
			if err == nil || serr == nil {
				t.Fatalf("mutation %s: client %v, server %v; want both to fail", m, err, serr)
			}
			t.Logf("client: %v; server: %v", err, serr)
		})
	}
}

// TestServePerftestCountMismatch: a send client with fewer iterations than
// the server's --iters is reported as such, not waited for forever.
func TestServePerftestCountMismatch(t *testing.T) {
	a, b, ln, ctx := ptSetup(t, 10*time.Second)
	srv := make(chan error, 1)
	go func() {
		_, err := ServePerftest(ctx, OnDevice(b), ln, PerftestConfig{Op: "send", Size: 1024, Iters: 50, QPs: 2})
		srv <- err
	}()
	_, _ = fakePerftestClient(ctx, a, ln.Addr().String(), fakeTest{op: "send", size: 1024, iters: 40, qps: 2}, "")
	if err := <-srv; err == nil || !strings.Contains(err.Error(), "after sending 80 of 100") {
		t.Fatalf("server: %v", err)
	}
}

// ptSetup is two devices joined by a clean in-memory link, a listener
// for the exchange, and a context ending after timeout (or the test).
func ptSetup(t *testing.T, timeout time.Duration) (a, b *device.Device, ln net.Listener, ctx context.Context) {
	t.Helper()
	a, b = pair(t, memlink.Faults{})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return a, b, listen(t), ctx
}

// ptServed is what ServePerftest returned, from serveAsync.
type ptServed struct {
	sv  PerftestOutcome
	err error
}

// serveAsync runs ServePerftest on device b in the background.
func serveAsync(ctx context.Context, b *device.Device, ln net.Listener, cfg PerftestConfig) <-chan ptServed {
	srv := make(chan ptServed, 1)
	go func() {
		sv, err := ServePerftest(ctx, OnDevice(b), ln, cfg)
		srv <- ptServed{sv, err}
	}()
	return srv
}

// runPerftestPair runs our client against our server.
func runPerftestPair(t *testing.T, cfg PerftestConfig, faults memlink.Faults) (PerftestOutcome, PerftestOutcome) {
	t.Helper()
	a, b := pair(t, faults)
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := serveAsync(ctx, b, ln, cfg)
	run, err := RunPerftest(ctx, OnDevice(a), ln.Addr().String(), cfg)
	s := <-srv
	if err != nil || s.err != nil {
		t.Fatalf("client: %v; server: %v", err, s.err)
	}
	return run, s.sv
}

// TestPerftestClientServer: our client and our server agree for every
// test, -q 1 and 4, with and without -a.
func TestPerftestClientServer(t *testing.T) {
	for _, ft := range ptTests() {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestPair(t, ft.config(), memlink.Faults{})
			checkPerftestPair(t, ft, run, sv)
		})
	}
}

func checkPerftestPair(t *testing.T, ft fakeTest, run PerftestOutcome, sv PerftestOutcome) {
	t.Helper()
	sizes := ft.sizes()
	if len(run.Lines) != len(sizes) {
		t.Fatalf("client: %d lines for %d sizes", len(run.Lines), len(sizes))
	}
	if ft.op == "send" {
		if len(sv.Lines) != len(sizes) {
			t.Fatalf("server: %d lines for %d sizes", len(sv.Lines), len(sizes))
		}
		for i := range sizes {
			if sv.Lines[i].Iters != run.Lines[i].Iters || sv.Lines[i].Bytes != run.Lines[i].Bytes {
				t.Fatalf("size %d: client %+v, server %+v", sizes[i], run.Lines[i], sv.Lines[i])
			}
		}
		return
	}
	if len(sv.Lines) != 1 || sv.Lines[0] != run.Lines[len(run.Lines)-1] {
		t.Fatalf("server printed %+v, client's last line %+v", sv.Lines, run.Lines[len(run.Lines)-1])
	}
}

// TestPerftestLossy: both roles over a link that loses, reorders and
// duplicates frames.
func TestPerftestLossy(t *testing.T) {
	faults := memlink.Faults{Loss: 0.02, Reorder: 0.02, Duplicate: 0.02}
	for _, ft := range []fakeTest{
		{op: "write", size: 3000, iters: 100, qps: 2},
		{op: "read", size: 3000, iters: 100, qps: 2},
		{op: "send", size: 3000, iters: 100, qps: 2},
		{op: "atomic", size: 8, iters: 200, qps: 2},
		{op: "send", size: 4096, iters: 10, qps: 2, all: true},
	} {
		t.Run(ft.String(), func(t *testing.T) {
			run, sv := runPerftestPair(t, ft.config(), faults)
			checkPerftestPair(t, ft, run, sv)
		})
	}
}

func TestPerftestConfigCheck(t *testing.T) {
	for _, cfg := range []PerftestConfig{
		{Op: "frob"}, {Op: "atomic", Size: 16}, {Op: "atomic", All: true}, {Op: "write", CmpSwap: true},
		{Op: "write", Iters: 4}, {Op: "write", QPs: 65}, {Op: "send", Duration: time.Second}, {Op: "write", All: true, Duration: time.Second},
	} {
		if err := cfg.check(); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	cfg := PerftestConfig{Op: "write", All: true}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	if s := cfg.sizes(); len(s) != 23 || s[0] != 2 || s[22] != 1<<23 {
		t.Fatalf("-a sizes %v: want 2^1 .. 2^23, as the mains' for (i = 1; i < 24; ++i)", s)
	}
	for op, iters := range map[string]int{"write": 5000, "read": 1000, "send": 1000, "atomic": 1000} {
		cfg := PerftestConfig{Op: op}
		if err := cfg.check(); err != nil || cfg.Iters != iters || cfg.QPs != 1 || op == "atomic" && cfg.Size != 8 || op != "atomic" && cfg.Size != 65536 {
			t.Errorf("%s defaults: %+v %v", op, cfg, err)
		}
	}
}

func TestPrintPerftest(t *testing.T) {
	var b bytes.Buffer
	PrintPerftest(&b, PerftestTitle("atomic", true, false), 2, 1024, []PerftestLine{{Bytes: 65536, Iters: 5000, BWPeak: 1096.12, BWAvg: 1093.55, MsgRate: 0.017497}})
	// REPORT_FMT " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf" and "\n".
	row := " 65536      5000             1096.12            1093.55\t\t   0.017497\n"
	head := " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	rule := strings.Repeat("-", 87) + "\n"
	if !strings.Contains(b.String(), head+row+rule) || !strings.HasPrefix(b.String(), rule) || !strings.Contains(b.String(), "Atomic CMP_AND_SWAP BW Test") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// TestPerftestRunAllocs: the client's request loop allocates nothing per
// request: ten times the requests cost no more allocations (with both
// devices' engines running in this process, theirs are counted too).
func TestPerftestRunAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	// A small link capacity bounds the frame buffers memlink grows into
	// (lazily, up to the deepest queue a run reaches), so that the warm-up
	// reaches it for sure.
	a, b := pairWith(t, memlink.Config{Capacity: 256}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gid := a.GIDs()[0]
	fa, err := OnDevice(a).open(ctx, gid.Unmap(), fabric.EPMsg, fabric.ProgressManual, 2*ptTxDepth, epQueue)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.close()
	fb, err := OnDevice(b).open(ctx, gid.Unmap(), fabric.EPMsg, fabric.ProgressManual, 2*ptTxDepth, epQueue)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.close()
	sa, err := newSession(fa, 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.close()
	sb, err := newSession(fb, 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.close()
	if err := sa.connect(ctx, sb.infos(gid), 1024); err != nil {
		t.Fatal(err)
	}
	if err := sb.connect(ctx, sa.infos(gid), 1024); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
				fb.dom.Progress()
			}
		}
	}()
	defer func() { close(stop); <-polled }()
	mallocs := func(iters int) uint64 {
		cfg := PerftestConfig{Op: "write", Size: 4096, Iters: iters, QPs: 2}
		if err := cfg.check(); err != nil {
			t.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if _, _, err := sa.ptRun(ctx, cfg, 4096, 1024, sb.infos(gid)); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&m1)
		return m1.Mallocs - m0.Mallocs
	}
	mallocs(5000) // warm up: queues, buffers
	few, many := mallocs(500), mallocs(5000)
	if many > few+200 {
		t.Fatalf("%d allocations for 10000 writes, %d for 1000: the loop allocates per request", many, few)
	}
}

// ptLateStart is how long the "late" fake client waits before sending.
const ptLateStart = 300 * time.Millisecond

// TestServePerftestSendClock pins what our send server times: perftest's
// server clock, from its first receive completion to its last
// (run_iter_bw_server's set_on_first_rx_packet), so a client that starts
// sending late is not charged for the wait. (Timing from the barrier, as
// this server once did, measured ptLateStart more.)
func TestServePerftestSendClock(t *testing.T) {
	a, b, ln, ctx := ptSetup(t, 20*time.Second)
	ft := fakeTest{op: "send", size: 1, iters: 200, qps: 1}
	srv := serveAsync(ctx, b, ln, ft.config())
	_, err := fakePerftestClient(ctx, a, ln.Addr().String(), ft, "late")
	s := <-srv
	if err != nil || s.err != nil {
		t.Fatalf("client: %v; server: %v", err, s.err)
	}
	l := s.sv.Lines[0]
	timed := time.Duration(float64(l.Iters) * float64(l.Bytes) / (l.BWAvg * mib) * 1e9)
	if l.Iters != 200 || timed <= 0 || timed >= ptLateStart {
		t.Fatalf("the server timed %v for %d messages (line %+v): it should start at the first receive, after the client's %v wait", timed, l.Iters, l, ptLateStart)
	}
	t.Logf("server timed %v", timed)
}
