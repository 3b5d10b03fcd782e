package perf

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/softfabric/softfabric/fabric"
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
	MTU int
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
func (pp *UDPingPong) PortMTU(d *Device) (int, error) {
	m, err := d.activeMTU()
	if err != nil {
		return 0, err
	}
	if pp.MTU > 0 && pp.MTU < m {
		m = pp.MTU
	}
	return m, nil
}

// udEnd is one end: a DGRAM endpoint with ibv_ud_pingpong's Q_Key, its CQ,
// the peer in an AV, on a domain with manual progress.
type udEnd struct {
	pp     *UDPingPong
	fb     *fab
	cq     *fabric.CQ
	av     *fabric.AV
	ep     *fabric.Endpoint
	mr     *fabric.MR
	buf    []byte
	peer   fabric.Addr
	local  PPAddr
	remote PPAddr
}

// prepare checks the parameters before any connection.
func (pp *UDPingPong) prepare(d *Device) error {
	pp.defaults()
	if pp.Size < 0 {
		return fmt.Errorf("message size %d", pp.Size)
	}
	m, err := pp.PortMTU(d)
	if err != nil {
		return err
	}
	if pp.Size > m {
		return fmt.Errorf("requested size %d larger than port MTU (%d)", pp.Size, m)
	}
	return nil
}

// setup opens the end's domain (the exchange runs from nc's local
// address) and endpoint, and posts the receives.
func (pp *UDPingPong) setup(ctx context.Context, d *Device, nc net.Conn) (ppEnd, error) {
	local, _ := localAddr(nc)
	fb, err := d.open(ctx, local, fabric.EPDgram, fabric.ProgressManual, 16, ppRxDepth)
	if err != nil {
		return nil, err
	}
	// memset(ctx->buf, 0x7b, size + 40): what goes on the wire, from
	// byte 40 on (the first 40 take a receive's GRH in the tool).
	e := &udEnd{pp: pp, fb: fb, buf: bytes.Repeat([]byte{0x7b}, pp.Size+udGRHSize)}
	if err := e.open(); err != nil {
		e.destroy()
		return nil, err
	}
	if e.local.GID, err = fb.gid(); err != nil {
		e.destroy()
		return nil, err
	}
	for i := 0; i < ppRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.destroy()
			return nil, fmt.Errorf("couldn't post receive (%d): %w", i, err)
		}
	}
	// Hand the receives to the queue pair now (manual progress), as
	// ibv_post_recv does: a datagram that finds none is dropped.
	fb.dom.Progress()
	return e, nil
}

// udGRHSize is the room a UD receive leaves for the GRH.
const udGRHSize = 40

func (e *udEnd) open() error {
	dom := e.fb.dom
	var err error
	if e.cq, err = dom.CQ(e.fb.cqSize(1)); err != nil {
		return err
	}
	if e.av, err = dom.AV(1); err != nil {
		return err
	}
	if e.mr, err = dom.RegisterMemory(e.buf, 0); err != nil {
		return err
	}
	if e.ep, err = dom.Endpoint(&e.fb.info); err != nil {
		return err
	}
	if err := e.ep.SetOption(fabric.OptQKey, UDQKey); err != nil {
		return err
	}
	if err := e.ep.Bind(e.cq, 0); err != nil {
		return err
	}
	if err := e.ep.Bind(e.av, 0); err != nil {
		return err
	}
	if err := e.ep.Enable(); err != nil {
		return err
	}
	// The tool announces its send queue's PSN, which a UD peer ignores.
	e.local = PPAddr{QPInfo: fabric.QPInfo{QPN: e.ep.QPInfo().QPN, PSN: rand.Uint32() & 0xffffff}}
	return nil
}

func (e *udEnd) destroy() {
	if e.ep != nil {
		_ = e.ep.Close()
	}
	if e.mr != nil {
		_ = e.mr.Close()
	}
	if e.av != nil {
		_ = e.av.Close()
	}
	if e.cq != nil {
		_ = e.cq.Close()
	}
	e.fb.close()
}

func (e *udEnd) postRecv() error {
	return e.ep.Recv(e.buf[udGRHSize:], e.mr.Desc(), fabric.AddrUnspec, ppRecvWRID)
}

func (e *udEnd) postSend(int) error {
	return e.ep.Send(e.buf[udGRHSize:], e.mr.Desc(), e.peer, ppSendWRID)
}

func (e *udEnd) messages() []PPAddr { return []PPAddr{e.local} }

func (e *udEnd) takeRemote(all []PPAddr) error {
	e.remote = all[0]
	return nil
}

// connect is pp_connect_ctx: the address handle (an AV entry) to the
// peer's GID.
func (e *udEnd) connect(context.Context) error {
	if !e.remote.HasGID() {
		return fmt.Errorf("the peer sent no GID (QPN %#06x): RoCE needs one; give ibv_ud_pingpong -g <gid index>", e.remote.QPN)
	}
	x, err := e.av.Insert(fabric.Address{IP: e.remote.GID, QPN: e.remote.QPN})
	if err != nil {
		return fmt.Errorf("failed to create AH: %w", err)
	}
	e.peer = x
	return nil
}

func (e *udEnd) loop() ppLoop {
	return ppLoop{cqs: []*fabric.CQ{e.cq}, nqps: 1, rxDepth: ppRxDepth, iters: e.pp.Iters, postRecv: e.postRecv, postSend: e.postSend}
}

func (e *udEnd) finish(el time.Duration) PingPongResult {
	// The last datagram must leave before the QP goes away.
	e.fb.drainUntil(time.Now().Add(10 * time.Millisecond))
	r := ppResult(e.pp.Size, e.pp.Iters, el)
	r.Mode, r.Local, r.Remote = "ud", []PPAddr{e.local}, []PPAddr{e.remote}
	return r
}

// Serve accepts one client on l and plays the server's part.
func (pp *UDPingPong) Serve(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
	return servePP(ctx, d, l, pp)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *UDPingPong) Run(ctx context.Context, d *Device, server string) (PingPongResult, error) {
	return runPP(ctx, d, server, pp)
}
