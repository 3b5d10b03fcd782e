package perf

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// SRQPingPong runs ibv_srq_pingpong's test (rdma-core
// libibverbs/examples/srq_pingpong.c) and speaks its exchange, so either
// end may be the unmodified tool:
//
//   - QPs RC queue pairs (-q, default 16, at most 255) on each side share
//     one SRQ of 500 receives (-r) and one CQ; one buffer of size bytes
//     serves every send and receive;
//   - the exchange always carries MAX_QP = 256 messages each way, whatever
//     -q is: the QPs' "%04x:%06x:%06x:%s" in order, then all-zero ones
//     ("0000:000000:000000:" and 32 zeros) for the unused slots. The count
//     is not exchanged: both ends must run the same -q. The client writes
//     its 256 first; the server reads them, connects its QPs, answers with
//     its 256 and waits for the client's "done"; the client connects its
//     QPs after the exchange;
//   - QP i connects to the peer's QP i: path MTU -m (default 1024), RQ PSN
//     from message i, max_dest_rd_atomic 1, min_rnr_timer 12, timeout 14,
//     retry_cnt 7, rnr_retry 7, max_rd_atomic 1; every QP takes its GID
//     from message 0 (the tool's dest->gid);
//   - the client posts one send on every QP; the completion loop keeps a
//     RECV|SEND pending mask per QP and counts sends and receives over all
//     QPs, so Iters is the total number of exchanges, not per QP (the
//     tool's usage says "per QP"; its code counts the total); the SRQ is
//     refilled when at most QPs receives remain.
type SRQPingPong struct {
	Size  int // bytes per message (ibv_srq_pingpong -s, default 4096)
	Iters int // exchanges over all QPs together (-n, default 1000)
	MTU   int // path MTU (-m, default 1024)
	QPs   int // queue pairs (-q, default 16, at most SRQMaxQPs)
	// WireGID and ParseWireGID convert GIDs to and from rdma-core's
	// 32-hex-digit exchange format.
	WireGID      func(netip.Addr) string
	ParseWireGID func(string) (netip.Addr, error)
}

// SRQMaxQP is srq_pingpong's MAX_QP: the number of messages its exchange
// carries each way.
const SRQMaxQP = 256

// SRQMaxQPs is the most QPs srq_pingpong runs: it refuses
// num_qp >= MAX_QP (older versions did not check, and overran their
// arrays).
const SRQMaxQPs = SRQMaxQP - 1

func (pp *SRQPingPong) defaults() {
	if pp.Size == 0 {
		pp.Size = 4096
	}
	if pp.Iters == 0 {
		pp.Iters = 1000
	}
	if pp.MTU == 0 {
		pp.MTU = 1024
	}
	if pp.QPs == 0 {
		pp.QPs = 16
	}
}

func (pp *SRQPingPong) check() error {
	switch {
	case pp.Size < 1:
		return fmt.Errorf("message size %d", pp.Size)
	case pp.QPs < 1 || pp.QPs > SRQMaxQPs:
		return fmt.Errorf("%d QPs: ibv_srq_pingpong runs 1 to %d", pp.QPs, SRQMaxQPs)
	case pp.QPs > ppRxDepth:
		return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP", ppRxDepth, pp.QPs)
	case !verbs.ValidMTU(pp.MTU):
		return fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", pp.MTU)
	}
	return nil
}

type srqEnd struct {
	pp      *SRQPingPong
	d       *device.Device
	cq      *verbs.CQ
	srq     *verbs.RecvQueue
	qps     []*rc.QP
	buf     *mr.Region
	local   []PPAddr
	remote  []PPAddr
	destroy func()
}

func (pp *SRQPingPong) setup(d *device.Device) (*srqEnd, error) {
	pp.defaults()
	if err := pp.check(); err != nil {
		return nil, err
	}
	// ibv_create_cq(rx_depth + num_qp): every receive and one send per QP.
	e := &srqEnd{pp: pp, d: d, cq: verbs.NewCQ(ppRxDepth + pp.QPs), srq: verbs.NewSRQ(ppRxDepth)}
	buf, err := d.MRs().Register(make([]byte, pp.Size), mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	e.buf = buf
	e.destroy = func() {
		for _, q := range e.qps {
			d.Destroy(q)
		}
		_ = d.MRs().Deregister(buf)
	}
	for i := 0; i < pp.QPs; i++ {
		q, err := d.NewRC(device.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, RQ: e.srq}, 0)
		if err != nil {
			e.destroy()
			return nil, fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		e.qps = append(e.qps, q)
		e.local = append(e.local, PPAddr{QPN: q.QPN(), PSN: rand.Uint32() & psn.Mask})
	}
	for i := 0; i < ppRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.destroy()
			return nil, fmt.Errorf("couldn't post receive (%d): %w", i, err)
		}
	}
	return e, nil
}

func (e *srqEnd) postRecv() error {
	sge := [1]mr.SGE{{Addr: e.buf.Addr(), Length: uint32(e.pp.Size), LKey: e.buf.LKey()}}
	return e.srq.Post(&verbs.RecvWR{ID: ppRecvWRID, SGL: sge[:]})
}

func (e *srqEnd) postSend(i int) error {
	sge := [1]mr.SGE{{Addr: e.buf.Addr(), Length: uint32(e.pp.Size), LKey: e.buf.LKey()}}
	return e.qps[i].PostSend(&verbs.SendWR{ID: ppSendWRID, Op: verbs.OpSend, Flags: verbs.Signaled, SGL: sge[:]})
}

// messages are the 256 this end sends: its QPs, then zero slots.
func (e *srqEnd) messages() []PPAddr {
	m := make([]PPAddr, SRQMaxQP)
	copy(m, e.local)
	return m
}

// takeRemote keeps the peer's first QPs messages. The tool reads the
// other slots and ignores them; a QP the peer did not fill, or one it
// filled beyond ours, means the two ran with different -q, which the
// tool would discover only by hanging.
func (e *srqEnd) takeRemote(all []PPAddr) error {
	n := e.pp.QPs
	for i, a := range all {
		used := a.QPN != 0
		if i < n && !used {
			return fmt.Errorf("pingpong exchange: the peer has no QP %d: does it run -q %d as we do?", i, n)
		}
		if i >= n && used {
			return fmt.Errorf("pingpong exchange: the peer has more than %d QPs: does it run -q %d as we do?", n, n)
		}
	}
	e.remote = all[:n]
	return nil
}

// connect is pp_connect_ctx: QP i to the peer's QP i, all through the
// GID of message 0.
func (e *srqEnd) connect(ctx context.Context) error {
	gid := e.remote[0].GID
	if zeroGID(gid) {
		return fmt.Errorf("the peer sent no GID: RoCE needs one; give ibv_srq_pingpong -g <gid index>")
	}
	mtu := min(e.pp.MTU, e.d.ActiveMTU())
	for i, q := range e.qps {
		r := device.Remote{QPN: e.remote[i].QPN, PSN: e.remote[i].PSN, GID: gid}
		o := device.ConnectOptions{PathMTU: mtu, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, RdAtomic: 1}
		if err := e.d.ConnectRC(ctx, q, e.local[i].PSN, r, o); err != nil {
			return fmt.Errorf("failed to connect QP[%d]: %w", i, err)
		}
	}
	return nil
}

func (e *srqEnd) loop(ctx context.Context, client bool) (PingPongResult, error) {
	qpns := make([]uint32, len(e.qps))
	for i, q := range e.qps {
		qpns[i] = q.QPN()
	}
	l := ppLoop{d: e.d, cq: e.cq, qpns: qpns, rxDepth: ppRxDepth, iters: e.pp.Iters, postRecv: e.postRecv, postSend: e.postSend}
	el, err := l.run(ctx, client)
	if err != nil {
		return PingPongResult{}, err
	}
	// The peer may still need our ACKs, or replays of lost ones: keep
	// answering until the link has been quiet for two retransmission
	// timeouts (timeout 14 is 67 ms).
	drainQuiet(e.d, 150*time.Millisecond, time.Second)
	return PingPongResult{
		Bytes: int64(e.pp.Size) * int64(e.pp.Iters) * 2, Iters: e.pp.Iters, Elapsed: el,
		Mode: "srq", Local: e.local, Remote: e.remote,
	}, nil
}

// Serve accepts one client on l and plays the server's part.
func (pp *SRQPingPong) Serve(ctx context.Context, d *device.Device, l net.Listener) (PingPongResult, error) {
	e, err := pp.setup(d)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.destroy()
	nc, err := acceptPingPong(l)
	if err != nil {
		return PingPongResult{}, err
	}
	defer nc.Close()
	gid, err := exchangeGID(d, nc)
	if err != nil {
		return PingPongResult{}, err
	}
	for i := range e.local {
		e.local[i].GID = gid
	}
	all, err := readPPAddrs(nc, pp.ParseWireGID, SRQMaxQP)
	if err != nil {
		return PingPongResult{}, err
	}
	if err := e.takeRemote(all); err != nil {
		return PingPongResult{}, err
	}
	if err := e.connect(ctx); err != nil {
		return PingPongResult{}, err
	}
	if err := writePPAddrs(nc, pp.WireGID, e.messages()); err != nil {
		return PingPongResult{}, err
	}
	if err := readDone(nc); err != nil {
		return PingPongResult{}, err
	}
	return e.loop(ctx, false)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *SRQPingPong) Run(ctx context.Context, d *device.Device, server string) (PingPongResult, error) {
	e, err := pp.setup(d)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.destroy()
	nc, err := dialPingPong(ctx, server)
	if err != nil {
		return PingPongResult{}, err
	}
	defer nc.Close()
	gid, err := exchangeGID(d, nc)
	if err != nil {
		return PingPongResult{}, err
	}
	for i := range e.local {
		e.local[i].GID = gid
	}
	if err := writePPAddrs(nc, pp.WireGID, e.messages()); err != nil {
		return PingPongResult{}, err
	}
	all, err := readPPAddrs(nc, pp.ParseWireGID, SRQMaxQP)
	if err != nil {
		return PingPongResult{}, err
	}
	if err := e.takeRemote(all); err != nil {
		return PingPongResult{}, err // the server sees the connection close
	}
	if err := writeDone(nc); err != nil {
		return PingPongResult{}, err
	}
	// The client connects its QPs after the exchange.
	if err := e.connect(ctx); err != nil {
		return PingPongResult{}, err
	}
	return e.loop(ctx, true)
}
