package perf

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// PingPong runs ibv_rc_pingpong's test: both ends post receives, the client
// sends first, and each end sends its next message once its previous send
// and a receive have completed, Iters times each way.
type PingPong struct {
	Size  int // bytes per message (ibv_rc_pingpong -s, default 4096)
	Iters int // round trips (-n, default 1000)
	MTU   int // path MTU (-m, default 1024)
	// WireGID and ParseWireGID convert GIDs to and from rdma-core's
	// 32-hex-digit exchange format.
	WireGID      func(netip.Addr) string
	ParseWireGID func(string) (netip.Addr, error)
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

// The exchange is ibv_rc_pingpong's: the client writes
// "LID:QPN:PSN:GID" ("%04x:%06x:%06x:%s", 52 bytes with the NUL), the
// server answers with its own, and the client confirms with "done".
const ppMsgSize = len("0000:000000:000000:00000000000000000000000000000000") + 1

func (pp *PingPong) defaults() {
	if pp.Size == 0 {
		pp.Size = 4096
	}
	if pp.Iters == 0 {
		pp.Iters = 1000
	}
	if pp.MTU == 0 {
		pp.MTU = 1024
	}
}

func (pp *PingPong) encode(q fabric.QPInfo) []byte {
	return encodePPAddr(pp.WireGID, PPAddr{QPN: q.QPN, PSN: q.PSN, GID: q.GID})
}

func (pp *PingPong) decode(msg []byte) (fabric.QPInfo, error) {
	a, err := decodePPAddr(pp.ParseWireGID, msg)
	if err != nil {
		return fabric.QPInfo{}, err
	}
	return fabric.QPInfo{QPN: a.QPN, PSN: a.PSN, GID: a.GID}, nil
}

// ppEnd is one end of ibv_rc_pingpong's test: one MSG endpoint, its CQ
// and buffer, on a domain with manual progress (the loop drives it).
type ppEnd struct {
	fb   *fab
	pp   *PingPong
	cq   *fabric.CQ
	ep   *fabric.Endpoint
	mr   *fabric.MR
	buf  []byte
	cs   [16]fabric.Completion
	self fabric.QPInfo
}

const ppRCRxDepth = 500 // ibv_rc_pingpong's rx_depth

// setup opens the end's domain (the exchange runs from nc's local
// address), endpoint and buffer, and posts the receives.
func (pp *PingPong) setup(ctx context.Context, d *Device, nc net.Conn) (*ppEnd, error) {
	local, _ := localAddr(nc)
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressManual, 16, ppRCRxDepth)
	if err != nil {
		return nil, err
	}
	e := &ppEnd{fb: fb, pp: pp, buf: make([]byte, max(pp.Size, 1))}
	if err := e.open(); err != nil {
		e.close()
		return nil, err
	}
	if e.self.GID, err = fb.gid(); err != nil {
		e.close()
		return nil, err
	}
	for i := 0; i < ppRCRxDepth; i++ {
		if err := e.postRecv(); err != nil {
			e.close()
			return nil, err
		}
	}
	// Hand the receives to the queue pair now (manual progress), as
	// ibv_post_recv does.
	fb.dom.Progress()
	return e, nil
}

func (e *ppEnd) open() error {
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

func (e *ppEnd) close() {
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

func (e *ppEnd) postRecv() error {
	return e.ep.Recv(e.buf[:e.pp.Size], e.mr.Desc(), fabric.AddrUnspec, 1)
}

func (e *ppEnd) postSend() error {
	return e.ep.Send(e.buf[:e.pp.Size], e.mr.Desc(), fabric.AddrUnspec, 2)
}

func (e *ppEnd) connect(ctx context.Context, r fabric.QPInfo) error {
	return e.ep.ConnectQP(ctx, r, fabric.QPOptions{PathMTU: min(e.pp.MTU, e.fb.dom.ActiveMTU())})
}

// loop runs ibv_rc_pingpong's completion loop.
func (e *ppEnd) loop(ctx context.Context, client bool) (PingPongResult, error) {
	const recvID, sendID = 1, 2
	iters := e.pp.Iters
	pending := recvID
	start := time.Now()
	if client {
		if err := e.postSend(); err != nil {
			return PingPongResult{}, err
		}
		pending |= sendID
	}
	routs := ppRCRxDepth
	rcnt, scnt := 0, 0
	for rcnt < iters || scnt < iters {
		n := e.cq.Read(e.cs[:])
		for _, c := range e.cs[:n] {
			if err := c.Err(); err != nil {
				return PingPongResult{}, fmt.Errorf("completion %v (wr %d) after %d sends, %d receives", err, c.Context, scnt, rcnt)
			}
			switch c.Context {
			case sendID:
				scnt++
			case recvID:
				routs--
				if routs <= 1 {
					for ; routs < ppRCRxDepth; routs++ {
						if err := e.postRecv(); err != nil {
							return PingPongResult{}, err
						}
					}
				}
				rcnt++
			}
			pending &^= int(c.Context)
			if scnt < iters && pending == 0 {
				if err := e.postSend(); err != nil {
					return PingPongResult{}, err
				}
				pending = recvID | sendID
			}
		}
		if (rcnt+scnt)&255 == 0 && ctx.Err() != nil {
			return PingPongResult{}, ctx.Err()
		}
	}
	el := time.Since(start)
	// Let the last ACK reach the peer before the queue pair goes away.
	e.fb.drainUntil(time.Now().Add(10 * time.Millisecond))
	return PingPongResult{Bytes: int64(e.pp.Size) * int64(iters) * 2, Iters: iters, Elapsed: el}, nil
}

// ServePingPong accepts one client on l and plays the server's part.
func (pp *PingPong) Serve(ctx context.Context, d *Device, l net.Listener) (PingPongResult, error) {
	pp.defaults()
	nc, err := l.Accept()
	if err != nil {
		return PingPongResult{}, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	msg := make([]byte, ppMsgSize)
	if _, err := io.ReadFull(nc, msg); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	remote, err := pp.decode(msg)
	if err != nil {
		return PingPongResult{}, err
	}
	e, err := pp.setup(ctx, d, nc)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.close()
	if err := e.connect(ctx, remote); err != nil {
		return PingPongResult{}, err
	}
	if _, err := nc.Write(pp.encode(e.self)); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	// The client's "done" says it has our address and its QP is ready.
	done := make([]byte, len("done")+1)
	if _, err := io.ReadFull(nc, done); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: waiting for done: %w", err)
	}
	return e.loop(ctx, false)
}

// Run connects to server (host or host:port) and plays the client's part.
func (pp *PingPong) Run(ctx context.Context, d *Device, server string) (PingPongResult, error) {
	pp.defaults()
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(DefaultPort))
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", server)
	if err != nil {
		return PingPongResult{}, fmt.Errorf("connecting to the pingpong server: %w", err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	e, err := pp.setup(ctx, d, nc)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.close()
	if _, err := nc.Write(pp.encode(e.self)); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	msg := make([]byte, ppMsgSize)
	if _, err := io.ReadFull(nc, msg); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	remote, err := pp.decode(msg)
	if err != nil {
		return PingPongResult{}, err
	}
	if err := e.connect(ctx, remote); err != nil {
		return PingPongResult{}, err
	}
	if _, err := nc.Write(append([]byte("done"), 0)); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	return e.loop(ctx, true)
}
