package perf

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/ud"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// UDPingPong runs ibv_ud_pingpong's test (rdma-core
// libibverbs/examples/ud_pingpong.c) and speaks its exchange, so either
// end may be the unmodified tool:
//
//   - one UD QP with Q_Key 0x11111111, sending with remote_qkey
//     0x11111111 through an address handle built from the peer's GID;
//   - one buffer of size+40 bytes: receives take all of it (the first 40
//     for the GRH), sends go from byte 40 on, size bytes;
//   - 500 receives posted (-r), refilled when at most one remains;
//   - the message must fit the port's active MTU ("Requested size larger
//     than port MTU");
//   - the exchange and completion loop of ibv_rc_pingpong: one
//     "%04x:%06x:%06x:%s" message each way (client first; the server
//     creates its address handle before it answers), then the client's
//     "done".
type UDPingPong struct {
	Size  int // bytes per message (ibv_ud_pingpong -s, default 1024)
	Iters int // round trips (-n, default 1000)
	// MTU, when set, lowers the limit on Size below the port's active MTU
	// (ibv_ud_pingpong has no -m: it always checks against the port).
	MTU          int
	WireGID      func(netip.Addr) string
	ParseWireGID func(string) (netip.Addr, error)
}

// UDQKey is the Q_Key ibv_ud_pingpong gives its QP and its sends.
const UDQKey = 0x11111111

const ppRxDepth = 500 // the examples' default -r

func (pp *UDPingPong) defaults() {
	if pp.Size == 0 {
		pp.Size = 1024
	}
	if pp.Iters == 0 {
		pp.Iters = 1000
	}
}

// PortMTU is the largest message the test can send on d: the port's
// active MTU, or MTU if lower.
func (pp *UDPingPong) PortMTU(d *device.Device) int {
	m := d.ActiveMTU()
	if pp.MTU > 0 && pp.MTU < m {
		m = pp.MTU
	}
	return m
}

type udEnd struct {
	pp      *UDPingPong
	d       *device.Device
	cq      *verbs.CQ
	q       *ud.QP
	buf     *mr.Region
	local   PPAddr
	remote  PPAddr
	ah      *verbs.AddressHandle
	destroy func()
}

func (pp *UDPingPong) setup(d *device.Device) (*udEnd, error) {
	pp.defaults()
	if pp.Size < 0 {
		return nil, fmt.Errorf("message size %d", pp.Size)
	}
	if m := pp.PortMTU(d); pp.Size > m {
		return nil, fmt.Errorf("requested size %d larger than port MTU (%d)", pp.Size, m)
	}
	e := &udEnd{pp: pp, d: d, cq: verbs.NewCQ(2 * ppRxDepth)}
	// memset(ctx->buf, 0x7b, size + 40): what goes on the wire.
	buf, err := d.MRs().Register(bytes.Repeat([]byte{0x7b}, pp.Size+ud.GRHSize), mr.LocalWrite)
	if err != nil {
		return nil, err
	}
	e.buf = buf
	q, err := d.NewUD(device.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, RQ: verbs.NewRecvQueue(ppRxDepth)}, UDQKey)
	if err != nil {
		_ = d.MRs().Deregister(buf)
		return nil, err
	}
	e.q = q
	e.destroy = func() { d.Destroy(q); _ = d.MRs().Deregister(buf) }
	// The tool's RTS sets sq_psn to the PSN it announces.
	e.local = PPAddr{QPN: q.QPN(), PSN: rand.Uint32() & psn.Mask}
	a := verbs.QPAttr{State: verbs.StateRTS, SQPSN: e.local.PSN}
	if err := q.Modify(&a, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		e.destroy()
		return nil, err
	}
	for i := 0; i < ppRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.destroy()
			return nil, fmt.Errorf("couldn't post receive (%d): %w", i, err)
		}
	}
	return e, nil
}

func (e *udEnd) postRecv() error {
	sge := [1]mr.SGE{{Addr: e.buf.Addr(), Length: uint32(e.pp.Size + ud.GRHSize), LKey: e.buf.LKey()}}
	return e.q.PostRecv(&verbs.RecvWR{ID: ppRecvWRID, SGL: sge[:]})
}

func (e *udEnd) postSend(int) error {
	sge := [1]mr.SGE{{Addr: e.buf.Addr() + ud.GRHSize, Length: uint32(e.pp.Size), LKey: e.buf.LKey()}}
	return e.q.PostSend(&verbs.SendWR{ID: ppSendWRID, Op: verbs.OpSend, Flags: verbs.Signaled, SGL: sge[:], Dest: e.ah})
}

// connect is pp_connect_ctx: the address handle to the peer's GID.
func (e *udEnd) connect(ctx context.Context) error {
	if zeroGID(e.remote.GID) {
		return fmt.Errorf("the peer sent no GID (QPN %#06x): RoCE needs one; give ibv_ud_pingpong -g <gid index>", e.remote.QPN)
	}
	ah, err := e.d.AddressHandle(ctx, e.remote.GID, e.q.QPN(), e.remote.QPN, UDQKey)
	if err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	e.ah = ah
	return nil
}

func (e *udEnd) loop(ctx context.Context, client bool) (PingPongResult, error) {
	l := ppLoop{d: e.d, cq: e.cq, qpns: []uint32{e.q.QPN()}, rxDepth: ppRxDepth, iters: e.pp.Iters, postRecv: e.postRecv, postSend: e.postSend}
	el, err := l.run(ctx, client)
	if err != nil {
		return PingPongResult{}, err
	}
	// The last datagram must leave before the QP goes away.
	drainUntil(e.d, time.Now().Add(10*time.Millisecond))
	return PingPongResult{
		Bytes: int64(e.pp.Size) * int64(e.pp.Iters) * 2, Iters: e.pp.Iters, Elapsed: el,
		Mode: "ud", Local: []PPAddr{e.local}, Remote: []PPAddr{e.remote},
	}, nil
}

// Serve accepts one client on l and plays the server's part.
func (pp *UDPingPong) Serve(ctx context.Context, d *device.Device, l net.Listener) (PingPongResult, error) {
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
	if e.local.GID, err = exchangeGID(d, nc); err != nil {
		return PingPongResult{}, err
	}
	rs, err := readPPAddrs(nc, pp.ParseWireGID, 1)
	if err != nil {
		return PingPongResult{}, err
	}
	e.remote = rs[0]
	if err := e.connect(ctx); err != nil {
		return PingPongResult{}, err
	}
	if err := writePPAddrs(nc, pp.WireGID, []PPAddr{e.local}); err != nil {
		return PingPongResult{}, err
	}
	if err := readDone(nc); err != nil {
		return PingPongResult{}, err
	}
	return e.loop(ctx, false)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *UDPingPong) Run(ctx context.Context, d *device.Device, server string) (PingPongResult, error) {
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
	if e.local.GID, err = exchangeGID(d, nc); err != nil {
		return PingPongResult{}, err
	}
	if err := writePPAddrs(nc, pp.WireGID, []PPAddr{e.local}); err != nil {
		return PingPongResult{}, err
	}
	rs, err := readPPAddrs(nc, pp.ParseWireGID, 1)
	if err != nil {
		return PingPongResult{}, err
	}
	e.remote = rs[0]
	if err := writeDone(nc); err != nil {
		return PingPongResult{}, err
	}
	// The client creates its address handle after the exchange.
	if err := e.connect(ctx); err != nil {
		return PingPongResult{}, err
	}
	return e.loop(ctx, true)
}
