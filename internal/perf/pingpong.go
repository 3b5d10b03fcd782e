package perf

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
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

func (pp *PingPong) encode(qpn, p uint32, gid netip.Addr) []byte {
	return encodePPAddr(pp.WireGID, PPAddr{QPN: qpn, PSN: p, GID: gid})
}

func (pp *PingPong) decode(msg []byte) (device.Remote, error) {
	a, err := decodePPAddr(pp.ParseWireGID, msg)
	if err != nil {
		return device.Remote{}, err
	}
	return device.Remote{QPN: a.QPN, PSN: a.PSN, GID: a.GID}, nil
}

type ppEnd struct {
	d          *device.Device
	scq, rcq   *verbs.CQ
	rq         *verbs.RecvQueue
	buf        *mr.Region
	sgl        [1]mr.SGE
	localPSN   uint32
	pp         *PingPong
	cs         [16]verbs.Completion
	qpDestroy  func()
	postRecv   func() error
	postSend   func() error
	connectQPN uint32
}

func (pp *PingPong) setup(d *device.Device) (*ppEnd, func(context.Context, device.Remote) error, error) {
	e := &ppEnd{d: d, scq: verbs.NewCQ(1024), rcq: verbs.NewCQ(1024), rq: verbs.NewRecvQueue(512), pp: pp, localPSN: rand.Uint32() & psn.Mask}
	buf, err := d.MRs().Register(make([]byte, max(pp.Size, 1)), mr.LocalWrite)
	if err != nil {
		return nil, nil, err
	}
	e.buf = buf
	e.sgl[0] = mr.SGE{Addr: buf.Addr(), Length: uint32(pp.Size), LKey: buf.LKey()}
	q, err := d.NewRC(device.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, RQ: e.rq}, 0)
	if err != nil {
		_ = d.MRs().Deregister(buf)
		return nil, nil, err
	}
	e.connectQPN = q.QPN()
	e.qpDestroy = func() { d.Destroy(q); _ = d.MRs().Deregister(buf) }
	recv := verbs.RecvWR{ID: 1, SGL: e.sgl[:]}
	send := verbs.SendWR{ID: 2, Op: verbs.OpSend, Flags: verbs.Signaled, SGL: e.sgl[:]}
	e.postRecv = func() error { return q.PostRecv(&recv) }
	e.postSend = func() error { return q.PostSend(&send) }
	connect := func(ctx context.Context, r device.Remote) error {
		return d.ConnectRC(ctx, q, e.localPSN, r, device.ConnectOptions{PathMTU: min(pp.MTU, d.ActiveMTU())})
	}
	for i := 0; i < 500; i++ { // ibv_rc_pingpong's rx_depth
		if err := e.postRecv(); err != nil {
			e.qpDestroy()
			return nil, nil, err
		}
	}
	return e, connect, nil
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
	routs := 500
	rcnt, scnt := 0, 0
	if client {
		scnt = 0
	}
	for rcnt < iters || scnt < iters {
		if _, err := e.d.Progress(); err != nil {
			return PingPongResult{}, err
		}
		for _, cq := range []*verbs.CQ{e.scq, e.rcq} {
			n := cq.Poll(e.cs[:])
			for _, c := range e.cs[:n] {
				if c.Status != verbs.Success {
					return PingPongResult{}, fmt.Errorf("completion %v (wr %d) after %d sends, %d receives", c.Status, c.WRID, scnt, rcnt)
				}
				switch c.WRID {
				case sendID:
					scnt++
				case recvID:
					routs--
					if routs <= 1 {
						for ; routs < 500; routs++ {
							if err := e.postRecv(); err != nil {
								return PingPongResult{}, err
							}
						}
					}
					rcnt++
				}
				pending &^= int(c.WRID)
				if scnt < iters && pending == 0 {
					if err := e.postSend(); err != nil {
						return PingPongResult{}, err
					}
					pending = recvID | sendID
				}
			}
		}
		if (rcnt+scnt)&255 == 0 && ctx.Err() != nil {
			return PingPongResult{}, ctx.Err()
		}
	}
	el := time.Since(start)
	// Let the last ACK reach the peer before the queue pair goes away.
	drainUntil(e.d, time.Now().Add(10*time.Millisecond))
	return PingPongResult{Bytes: int64(e.pp.Size) * int64(iters) * 2, Iters: iters, Elapsed: el}, nil
}

// ServePingPong accepts one client on l and plays the server's part.
func (pp *PingPong) Serve(ctx context.Context, d *device.Device, l net.Listener) (PingPongResult, error) {
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
	e, connect, err := pp.setup(d)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.qpDestroy()
	if err := connect(ctx, remote); err != nil {
		return PingPongResult{}, err
	}
	local, _ := localAddr(nc)
	gid, ok := d.GID(local)
	if !ok {
		return PingPongResult{}, fmt.Errorf("no GID for %v on %s", local, d.Name())
	}
	if _, err := nc.Write(pp.encode(e.connectQPN, e.localPSN, gid)); err != nil {
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
func (pp *PingPong) Run(ctx context.Context, d *device.Device, server string) (PingPongResult, error) {
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
	e, connect, err := pp.setup(d)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.qpDestroy()
	local, _ := localAddr(nc)
	gid, ok := d.GID(local)
	if !ok {
		return PingPongResult{}, fmt.Errorf("no GID for %v on %s", local, d.Name())
	}
	if _, err := nc.Write(pp.encode(e.connectQPN, e.localPSN, gid)); err != nil {
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
	if err := connect(ctx, remote); err != nil {
		return PingPongResult{}, err
	}
	if _, err := nc.Write(append([]byte("done"), 0)); err != nil {
		return PingPongResult{}, fmt.Errorf("pingpong exchange: %w", err)
	}
	return e.loop(ctx, true)
}
