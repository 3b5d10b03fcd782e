package perf

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob/rdmacore"
)

// The shape ibv_rc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong share:
// rdma-core's "LID:QPN:PSN:GID" exchange (internal/oob/rdmacore), the
// completion loop, and the summary. Each mode (pingpong.go, udpingpong.go,
// srqpingpong.go) supplies a ppMode and its end, ppEnd; servePP and runPP
// run every mode's test.

// PPAddr is one "LID:QPN:PSN:GID" message of the rdma-core pingpong
// examples: struct pingpong_dest.
type PPAddr = rdmacore.Dest

// ppMode is one pingpong test: its parameters, and how it opens an end.
type ppMode interface {
	// prepare checks the parameters, before any connection.
	prepare(d *Device) error
	// setup opens one end on d (the exchange runs from nc's local
	// address) and posts its receives.
	setup(ctx context.Context, d *Device, nc net.Conn) (ppEnd, error)
}

// ppEnd is one end of a pingpong test, set up.
type ppEnd interface {
	// messages are what this end writes in the exchange; it reads as
	// many.
	messages() []PPAddr
	// takeRemote keeps the peer's messages.
	takeRemote(all []PPAddr) error
	// connect is pp_connect_ctx: connects to the peer it took.
	connect(ctx context.Context) error
	// loop is the completion loop to run.
	loop() ppLoop
	// finish lets the transport settle after the loop and returns the
	// result of a test that took el.
	finish(el time.Duration) PingPongResult
	destroy()
}

// servePP accepts one client on l and plays the server's part of m: it
// reads the client's messages, connects, answers with its own and waits
// for "done" (pp_server_exch_dest).
func servePP(ctx context.Context, d *Device, l net.Listener, m ppMode) (PingPongResult, error) {
	accept := func() (net.Conn, error) { return rdmacore.Accept(l) }
	return playPP(ctx, d, m, false, accept, func(nc net.Conn, e ppEnd) error {
		mine := e.messages()
		all, err := rdmacore.ReadDests(nc, len(mine))
		if err != nil {
			return err
		}
		if err := e.takeRemote(all); err != nil {
			return err
		}
		if err := e.connect(ctx); err != nil {
			return err
		}
		if err := rdmacore.WriteDests(nc, mine); err != nil {
			return err
		}
		// The client's "done" says it has our address.
		return rdmacore.ReadDone(nc)
	})
}

// runPP connects to server (host or host:port) and plays the client's
// part of m: it writes its messages, reads the server's and confirms
// with "done" (pp_client_exch_dest), then connects.
func runPP(ctx context.Context, d *Device, server string, m ppMode) (PingPongResult, error) {
	dial := func() (net.Conn, error) { return rdmacore.Dial(ctx, server) }
	return playPP(ctx, d, m, true, dial, func(nc net.Conn, e ppEnd) error {
		mine := e.messages()
		if err := rdmacore.WriteDests(nc, mine); err != nil {
			return err
		}
		all, err := rdmacore.ReadDests(nc, len(mine))
		if err != nil {
			return err
		}
		if err := e.takeRemote(all); err != nil {
			return err // the server sees the connection close
		}
		if err := rdmacore.WriteDone(nc); err != nil {
			return err
		}
		// The client connects after the exchange.
		return e.connect(ctx)
	})
}

// playPP is one side of m's test: check the parameters, open the
// connection, set up the end, run the exchange, then the loop.
func playPP(ctx context.Context, d *Device, m ppMode, client bool, open func() (net.Conn, error), exchange func(net.Conn, ppEnd) error) (PingPongResult, error) {
	if err := m.prepare(d); err != nil {
		return PingPongResult{}, err
	}
	nc, err := open()
	if err != nil {
		return PingPongResult{}, err
	}
	defer nc.Close()
	e, err := m.setup(ctx, d, nc)
	if err != nil {
		return PingPongResult{}, err
	}
	defer e.destroy()
	if err := exchange(nc, e); err != nil {
		return PingPongResult{}, err
	}
	l := e.loop()
	el, err := l.run(ctx, client)
	if err != nil {
		return PingPongResult{}, err
	}
	return e.finish(el), nil
}

// ppResult is the result of size-byte messages, iters of them each way,
// in el.
func ppResult(size, iters int, el time.Duration) PingPongResult {
	return PingPongResult{Bytes: int64(size) * int64(iters) * 2, Iters: iters, Elapsed: el}
}

// AddressLines prints the local and remote address lines as the tool
// does: ibv_ud_pingpong writes a colon before the local GID, a comma
// before the remote one; ibv_srq_pingpong commas in both, one line per QP.
func (r PingPongResult) AddressLines() string {
	var b strings.Builder
	sep := ","
	if r.Mode == "ud" {
		sep = ":"
	}
	for _, a := range r.Local {
		fmt.Fprintf(&b, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", a.LID, a.QPN, a.PSN, sep, rdmacore.NtopGID(a.GID))
	}
	for _, a := range r.Remote {
		fmt.Fprintf(&b, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", a.LID, a.QPN, a.PSN, rdmacore.NtopGID(a.GID))
	}
	return b.String()
}

// ppLoop is the completion loop of ibv_rc_pingpong, ibv_ud_pingpong and
// ibv_srq_pingpong (ibv_rc_pingpong's, generalised to several QPs as
// srq_pingpong does): each QP keeps a pending mask of RECV|SEND; when a
// completion clears the last bit and fewer than iters sends have
// completed in all, the QP posts its next send. rcnt and scnt count over
// all QPs, so iters is the total, not per QP. Receives come from one
// queue (the QP's own or the shared one), refilled to rxDepth when at
// most nqps remain posted. Each QP's completions come on cqs[i] (one CQ
// for all: a context's high bits name the QP); the low bits are the work
// request's kind (ppRecvWRID, ppSendWRID).
type ppLoop struct {
	cqs      []*fabric.CQ
	nqps     int
	rxDepth  int
	iters    int
	postRecv func() error
	postSend func(i int) error
}

const ppRecvWRID, ppSendWRID = 1, 2

// ppCtx is the context of QP i's work request of kind wrid.
func ppCtx(i int, wrid uint64) uint64 { return uint64(i)<<8 | wrid }

func (l *ppLoop) run(ctx context.Context, client bool) (time.Duration, error) {
	n := l.nqps
	pending := make([]int, n)
	for i := range pending {
		pending[i] = ppRecvWRID
		if client {
			if err := l.postSend(i); err != nil {
				return 0, fmt.Errorf("couldn't post send: %w", err)
			}
			pending[i] |= ppSendWRID
		}
	}
	start := time.Now()
	routs := l.rxDepth
	rcnt, scnt := 0, 0
	var cs [64]fabric.Completion
	for spins := 0; rcnt < l.iters || scnt < l.iters; spins++ {
		for ci, cq := range l.cqs {
			ne := cq.Read(cs[:])
			for _, c := range cs[:ne] {
				wrid := c.Context & 0xff
				if err := c.Err(); err != nil {
					return 0, fmt.Errorf("failed status %v for wr_id %d after %d sends, %d receives", err, wrid, scnt, rcnt)
				}
				qi := int(c.Context >> 8)
				if len(l.cqs) > 1 {
					qi = ci
				}
				if qi >= n {
					return 0, fmt.Errorf("couldn't find QP %d", qi)
				}
				switch wrid {
				case ppSendWRID:
					scnt++
				case ppRecvWRID:
					if routs--; routs <= n {
						for ; routs < l.rxDepth; routs++ {
							if err := l.postRecv(); err != nil {
								return 0, fmt.Errorf("couldn't post receive (%d): %w", routs, err)
							}
						}
					}
					rcnt++
				default:
					return 0, fmt.Errorf("completion for unknown wr_id %d", wrid)
				}
				pending[qi] &^= int(wrid)
				if scnt < l.iters && pending[qi] == 0 {
					if err := l.postSend(qi); err != nil {
						return 0, fmt.Errorf("couldn't post send: %w", err)
					}
					pending[qi] = ppRecvWRID | ppSendWRID
				}
			}
		}
		if spins&1023 == 0 && ctx.Err() != nil {
			return 0, fmt.Errorf("pingpong: %w after %d sends, %d receives", ctx.Err(), scnt, rcnt)
		}
	}
	return time.Since(start), nil
}

// drainQuiet keeps the transport running after the test, so that the peer
// gets the ACKs (and, lost ones, the replays) it still needs: until quiet
// has passed with no frame in or out, or limit in all. With automatic
// progress the workers run by themselves; it watches their counters.
func (fb *fab) drainQuiet(quiet, limit time.Duration) {
	frames := func() uint64 {
		var n uint64
		for _, w := range fb.dom.WorkerStats() {
			n += w.RxFrames + w.TxFrames
		}
		return n
	}
	now := time.Now()
	end, last := now.Add(limit), now
	seen := frames()
	for now.Before(end) && now.Sub(last) < quiet {
		if fb.info.Domain.Progress == fabric.ProgressManual {
			fb.dom.Progress()
		} else {
			time.Sleep(time.Millisecond)
		}
		if f := frames(); f != seen {
			seen, last = f, now
		}
		now = time.Now()
	}
}
