package perf

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/rdmacore"
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
}

// SRQMaxQP is srq_pingpong's MAX_QP: the number of messages its exchange
// carries each way.
const SRQMaxQP = rdmacore.SRQMaxQP

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
	case pp.MTU != 256 && pp.MTU != 512 && pp.MTU != 1024 && pp.MTU != 2048 && pp.MTU != 4096:
		return fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", pp.MTU)
	}
	return nil
}

// srqEnd is one end: QPs MSG endpoints sharing one receive context, each
// with a CQ of its own (the completion's CQ names its QP), on a domain
// whose workers drive the transport (automatic progress: one loop reads
// every CQ).
type srqEnd struct {
	pp     *SRQPingPong
	fb     *fab
	srx    *fabric.SharedRx
	cqs    []*fabric.CQ
	eps    []*fabric.Endpoint
	mr     *fabric.MR
	buf    []byte
	local  []PPAddr
	remote []PPAddr
}

// prepare is the first step, before any connection: the parameters.
func (pp *SRQPingPong) prepare(*Device) error {
	pp.defaults()
	return pp.check()
}

// setup opens the end's domain (the exchange runs from nc's local
// address) and its QPs, and posts the receives.
func (pp *SRQPingPong) setup(ctx context.Context, d *Device, nc net.Conn) (ppEnd, error) {
	local, _ := localAddr(nc)
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressAuto, 16, 16)
	if err != nil {
		return nil, err
	}
	e := &srqEnd{pp: pp, fb: fb, buf: make([]byte, pp.Size)}
	if err := e.open(); err != nil {
		e.destroy()
		return nil, err
	}
	gid, err := fb.gid()
	if err != nil {
		e.destroy()
		return nil, err
	}
	for i := range e.local {
		e.local[i].GID = gid
	}
	for i := 0; i < ppRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.destroy()
			return nil, fmt.Errorf("couldn't post receive (%d): %w", i, err)
		}
	}
	return e, nil
}

func (e *srqEnd) open() error {
	dom := e.fb.dom
	var err error
	if e.mr, err = dom.RegisterMemory(e.buf, 0); err != nil {
		return err
	}
	if e.srx, err = dom.SharedRx(ppRxDepth); err != nil {
		return err
	}
	for i := 0; i < e.pp.QPs; i++ {
		// Every receive and one send.
		cq, err := dom.CQ(max(ppRxDepth+1, e.fb.cqSize(1)))
		if err != nil {
			return err
		}
		e.cqs = append(e.cqs, cq)
		ep, err := dom.Endpoint(&e.fb.info)
		if err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		e.eps = append(e.eps, ep)
		if err := ep.Bind(cq, 0); err != nil {
			return err
		}
		if err := ep.Bind(e.srx, 0); err != nil {
			return err
		}
		if err := ep.Enable(); err != nil {
			return fmt.Errorf("couldn't create QP[%d]: %w", i, err)
		}
		q := ep.QPInfo()
		e.local = append(e.local, PPAddr{QPInfo: fabric.QPInfo{QPN: q.QPN, PSN: q.PSN}})
	}
	return nil
}

func (e *srqEnd) destroy() {
	for _, ep := range e.eps {
		_ = ep.Close()
	}
	for _, cq := range e.cqs {
		_ = cq.Close()
	}
	if e.srx != nil {
		_ = e.srx.Close()
	}
	if e.mr != nil {
		_ = e.mr.Close()
	}
	e.fb.close()
}

func (e *srqEnd) postRecv() error {
	return e.srx.Recv(e.buf, e.mr.Desc(), ppRecvWRID)
}

func (e *srqEnd) postSend(i int) error {
	return e.eps[i].Send(e.buf, e.mr.Desc(), fabric.AddrUnspec, ppCtx(i, ppSendWRID))
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
	if !e.remote[0].HasGID() {
		return fmt.Errorf("the peer sent no GID: RoCE needs one; give ibv_srq_pingpong -g <gid index>")
	}
	mtu := min(e.pp.MTU, e.fb.dom.ActiveMTU())
	for i, ep := range e.eps {
		r := e.remote[i].QPInfo
		r.GID = gid
		o := fabric.QPOptions{PathMTU: mtu, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, RdAtomic: 1}
		if err := ep.ConnectQP(ctx, r, o); err != nil {
			return fmt.Errorf("failed to connect QP[%d]: %w", i, err)
		}
	}
	return nil
}

func (e *srqEnd) loop() ppLoop {
	return ppLoop{cqs: e.cqs, nqps: len(e.eps), rxDepth: ppRxDepth, iters: e.pp.Iters, postRecv: e.postRecv, postSend: e.postSend}
}

func (e *srqEnd) finish(el time.Duration) PingPongResult {
	// The peer may still need our ACKs, or replays of lost ones: keep
	// answering until the link has been quiet for two retransmission
	// timeouts (timeout 14 is 67 ms).
	e.fb.drainQuiet(150*time.Millisecond, time.Second)
	r := ppResult(e.pp.Size, e.pp.Iters, el)
	r.Mode, r.Local, r.Remote = "srq", e.local, e.remote
	return r
}

// Serve accepts one client on l and plays the server's part.
func (pp *SRQPingPong) Serve(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
	return servePP(ctx, d, l, pp)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *SRQPingPong) Run(ctx context.Context, d *Device, server string) (PingPongResult, error) {
	return runPP(ctx, d, server, pp)
}
