package perf

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// What ibv_ud_pingpong and ibv_srq_pingpong share with ibv_rc_pingpong:
// the 52-byte "LID:QPN:PSN:GID" message of their out-of-band exchange, the
// address lines they print, and the completion loop. ibv_rc_pingpong's own
// loop is in pingpong.go.

// PPAddr is one "LID:QPN:PSN:GID" message of the rdma-core pingpong
// examples: struct pingpong_dest.
type PPAddr struct {
	LID uint16 // 0 on RoCE (the port has no LID)
	QPN uint32
	PSN uint32
	// GID is the zero GID (or invalid) where the tool ran without -g.
	GID netip.Addr
}

// zeroWireGID is an all-zero GID in the wire format: what the examples
// send without -g, and for srq_pingpong's unused slots.
const zeroWireGID = "00000000000000000000000000000000"

// encodePPAddr is the C tools'
//
//	sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid);
//	write(sockfd, msg, sizeof msg);
//
// with msg a char[sizeof "0000:000000:000000:" + 32 hex digits], so 52
// bytes: the 51 characters and the NUL.
func encodePPAddr(wireGID func(netip.Addr) string, a PPAddr) []byte {
	g := zeroWireGID
	if a.GID.IsValid() {
		g = wireGID(a.GID)
	}
	msg := make([]byte, ppMsgSize)
	copy(msg, fmt.Sprintf("%04x:%06x:%06x:%s", a.LID, a.QPN&0xffffff, a.PSN&0xffffff, g))
	return msg
}

// decodePPAddr parses a message as the tools' sscanf("%x:%x:%x:%s") and
// wire_gid_to_gid do.
func decodePPAddr(parseWireGID func(string) (netip.Addr, error), msg []byte) (PPAddr, error) {
	s := strings.TrimRight(string(msg), "\x00")
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return PPAddr{}, fmt.Errorf("pingpong exchange: bad message %q", s)
	}
	lid, err0 := strconv.ParseUint(f[0], 16, 16)
	qpn, err1 := strconv.ParseUint(f[1], 16, 24)
	p, err2 := strconv.ParseUint(f[2], 16, 24)
	gid, err3 := parseWireGID(f[3])
	if err0 != nil || err1 != nil || err2 != nil || err3 != nil {
		return PPAddr{}, fmt.Errorf("pingpong exchange: bad message %q", s)
	}
	return PPAddr{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(p), GID: gid}, nil
}

// zeroGID reports whether a GID is absent or all zeros, as the C tools'
// test of dest->gid.global.interface_id (they look at the low half only)
// would treat it: no GRH, which RoCE cannot address.
func zeroGID(g netip.Addr) bool {
	if !g.IsValid() {
		return true
	}
	b := g.As16()
	return [8]byte(b[8:]) == [8]byte{}
}

// readPPAddrs reads n messages.
func readPPAddrs(nc net.Conn, parse func(string) (netip.Addr, error), n int) ([]PPAddr, error) {
	buf := make([]byte, n*ppMsgSize)
	if _, err := io.ReadFull(nc, buf); err != nil {
		return nil, fmt.Errorf("pingpong exchange: %w", err)
	}
	out := make([]PPAddr, n)
	for i := range out {
		a, err := decodePPAddr(parse, buf[i*ppMsgSize:(i+1)*ppMsgSize])
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// writePPAddrs writes one message per address.
func writePPAddrs(nc net.Conn, wireGID func(netip.Addr) string, as []PPAddr) error {
	buf := make([]byte, 0, len(as)*ppMsgSize)
	for _, a := range as {
		buf = append(buf, encodePPAddr(wireGID, a)...)
	}
	if _, err := nc.Write(buf); err != nil {
		return fmt.Errorf("pingpong exchange: %w", err)
	}
	return nil
}

// ppDone is the client's last word: write(sockfd, "done", sizeof "done"),
// the NUL included.
var ppDone = []byte("done\x00")

func readDone(nc net.Conn) error {
	b := make([]byte, len(ppDone))
	if _, err := io.ReadFull(nc, b); err != nil {
		return fmt.Errorf("pingpong exchange: waiting for done: %w", err)
	}
	return nil
}

func writeDone(nc net.Conn) error {
	if _, err := nc.Write(ppDone); err != nil {
		return fmt.Errorf("pingpong exchange: %w", err)
	}
	return nil
}

func dialPingPong(ctx context.Context, server string) (net.Conn, error) {
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(DefaultPort))
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, fmt.Errorf("connecting to the pingpong server: %w", err)
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return nc, nil
}

func acceptPingPong(l net.Listener) (net.Conn, error) {
	nc, err := l.Accept()
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	return nc, nil
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
		fmt.Fprintf(&b, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", a.LID, a.QPN, a.PSN, sep, ntopGID(a.GID))
	}
	for _, a := range r.Remote {
		fmt.Fprintf(&b, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", a.LID, a.QPN, a.PSN, ntopGID(a.GID))
	}
	return b.String()
}

// ntopGID is inet_ntop(AF_INET6, gid): "::" for no GID, "::ffff:a.b.c.d"
// for an IPv4-mapped one.
func ntopGID(g netip.Addr) string {
	if !g.IsValid() {
		return "::"
	}
	return netip.AddrFrom16(g.As16()).String()
}

// ppLoop is the completion loop of ibv_ud_pingpong and ibv_srq_pingpong
// (ibv_rc_pingpong's, generalised to several QPs as srq_pingpong does):
// each QP keeps a pending mask of RECV|SEND; when a completion clears the
// last bit and fewer than iters sends have completed in all, the QP posts
// its next send. rcnt and scnt count over all QPs, so iters is the total,
// not per QP. Receives come from one queue (the QP's own or the shared
// one), refilled to rxDepth when at most nqps remain posted. Each QP's
// completions come on cqs[i] (one CQ for all: a context's high bits name
// the QP); the low bits are the work request's kind (ppRecvWRID,
// ppSendWRID).
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
