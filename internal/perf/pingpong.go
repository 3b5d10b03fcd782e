package perf

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// PingPong runs ibv_rc_pingpong's test (rdma-core
// libibverbs/examples/rc_pingpong.c) and speaks its exchange: both ends
// post receives, the client sends first, and each end sends its next
// message once its previous send and a receive have completed, Iters
// times each way. The exchange is one "LID:QPN:PSN:GID" message each way
// (client first), then the client's "done".
type PingPong struct {
	Size  int // bytes per message (ibv_rc_pingpong -s, default 4096)
	Iters int // round trips (-n, default 1000)
	MTU   int // path MTU (-m, default 1024)
}

// PingPongResult is what ibv_rc_pingpong prints.
type PingPongResult struct {
	Bytes   int64         // size × iters × 2, as ibv_rc_pingpong counts
	Iters   int           //
	Elapsed time.Duration //
	// Mode is "ud" or "srq" for UDPingPong and SRQPingPong, "" for
	// PingPong. Local and Remote are their queue pairs' addresses as
	// exchanged (see AddressLines); PingPong leaves them empty.
	Mode          string
	Local, Remote []PPAddr
}

// String prints the result the way ibv_rc_pingpong does.
func (r PingPongResult) String() string {
	s := r.Elapsed.Seconds()
	return fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec\n%d iters in %.2f seconds = %.2f usec/iter\n",
		r.Bytes, s, float64(r.Bytes)*8/s/1e6, r.Iters, s, s*1e6/float64(r.Iters))
}

func (pp *PingPong) prepare(*Device) error {
	if pp.Size == 0 {
		pp.Size = 4096
	}
	if pp.Iters == 0 {
		pp.Iters = 1000
	}
	if pp.MTU == 0 {
		pp.MTU = 1024
	}
	return nil
}

// rcEnd is one end of ibv_rc_pingpong's test: one MSG endpoint, its CQ
// and buffer, on a domain with manual progress (the loop drives it).
type rcEnd struct {
	fb     *fab
	pp     *PingPong
	cq     *fabric.CQ
	ep     *fabric.Endpoint
	mr     *fabric.MR
	buf    []byte
	self   fabric.QPInfo
	remote fabric.QPInfo
}

const ppRCRxDepth = 500 // ibv_rc_pingpong's rx_depth

// setup opens the end's domain (the exchange runs from nc's local
// address), endpoint and buffer, and posts the receives.
func (pp *PingPong) setup(ctx context.Context, d *Device, nc net.Conn) (ppEnd, error) {
	local, _ := localAddr(nc)
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressManual, 16, ppRCRxDepth)
	if err != nil {
		return nil, err
	}
	e := &rcEnd{fb: fb, pp: pp, buf: make([]byte, max(pp.Size, 1))}
	if err := e.open(); err != nil {
		e.destroy()
		return nil, err
	}
	if e.self.GID, err = fb.gid(); err != nil {
		e.destroy()
		return nil, err
	}
	for i := 0; i < ppRCRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.destroy()
			return nil, err
		}
	}
	// Hand the receives to the queue pair now (manual progress), as
	// ibv_post_recv does.
	fb.dom.Progress()
	return e, nil
}

func (e *rcEnd) open() error {
	var err error
	if e.cq, err = e.fb.dom.CQ(e.fb.cqSize(1)); err != nil {
		return err
	}
	if e.mr, err = e.fb.dom.RegisterMemory(e.buf, 0); err != nil {
		return err
	}
	if e.ep, err = e.fb.dom.Endpoint(&e.fb.info); err != nil {
		return err
	}
	if err := e.ep.Bind(e.cq, 0); err != nil {
		return err
	}
	if err := e.ep.Enable(); err != nil {
		return err
	}
	e.self = e.ep.QPInfo()
	return nil
}

func (e *rcEnd) destroy() {
	if e.ep != nil {
		_ = e.ep.Close()
	}
	if e.mr != nil {
		_ = e.mr.Close()
	}
	if e.cq != nil {
		_ = e.cq.Close()
	}
	e.fb.close()
}

func (e *rcEnd) postRecv() error {
	return e.ep.Recv(e.buf[:e.pp.Size], e.mr.Desc(), fabric.AddrUnspec, ppRecvWRID)
}

func (e *rcEnd) postSend(int) error {
	return e.ep.Send(e.buf[:e.pp.Size], e.mr.Desc(), fabric.AddrUnspec, ppSendWRID)
}

func (e *rcEnd) messages() []PPAddr { return []PPAddr{{QPInfo: e.self}} }

func (e *rcEnd) takeRemote(all []PPAddr) error {
	e.remote = all[0].QPInfo
	return nil
}

func (e *rcEnd) connect(ctx context.Context) error {
	return e.ep.ConnectQP(ctx, e.remote, fabric.QPOptions{PathMTU: min(e.pp.MTU, e.fb.dom.ActiveMTU())})
}

func (e *rcEnd) loop() ppLoop {
	return ppLoop{cqs: []*fabric.CQ{e.cq}, nqps: 1, rxDepth: ppRCRxDepth, iters: e.pp.Iters, postRecv: e.postRecv, postSend: e.postSend}
}

func (e *rcEnd) finish(el time.Duration) PingPongResult {
	// Let the last ACK reach the peer before the queue pair goes away.
	e.fb.drainUntil(time.Now().Add(10 * time.Millisecond))
	return ppResult(e.pp.Size, e.pp.Iters, el)
}

// Serve accepts one client on l and plays the server's part.
func (pp *PingPong) Serve(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
	return servePP(ctx, d, l, pp)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *PingPong) Run(ctx context.Context, d *Device, server string) (PingPongResult, error) {
	return runPP(ctx, d, server, pp)
}
