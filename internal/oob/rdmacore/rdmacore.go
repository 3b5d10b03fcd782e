// Package rdmacore speaks the out-of-band exchange of rdma-core's example
// programs (libibverbs/examples/pingpong.c and the ibv_rc_pingpong,
// ibv_ud_pingpong and ibv_srq_pingpong mains), so that a client of
// package fabric can meet the unmodified tools.
//
// The exchange runs over one TCP connection (default port 18515) with
// fixed-size messages and no framing. Each side describes a queue pair
// with one 52-byte message, struct pingpong_dest as
//
//	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
//	gid_to_wire_gid(&my_dest->gid, gid);
//	sprintf(msg, "%04x:%06x:%06x:%s", my_dest->lid, my_dest->qpn, my_dest->psn, gid);
//	write(sockfd, msg, sizeof msg);
//
// that is LID, QPN and PSN in lowercase hex, the GID as 32 hex digits (its
// 16 bytes in order), 51 characters and the NUL. The reader takes it with
// sscanf(msg, "%x:%x:%x:%s") and wire_gid_to_gid. The client writes first
// (pp_client_exch_dest), the server reads, answers with its own
// (pp_server_exch_dest) and waits for the client's last word, "done" and
// its NUL (write(sockfd, "done", sizeof "done")). ibv_srq_pingpong sends
// MAX_QP (256) messages each way, its QPs' and then all-zero ones; the
// others one.
package rdmacore

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softfabric/softfabric/ctrl"
	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/oob"
)

// DefaultPort is the examples' default TCP port (-p).
const DefaultPort = 18515

// MsgSize is the size of one message: 51 characters and the NUL.
const MsgSize = len("0000:000000:000000:00000000000000000000000000000000") + 1

// SRQMaxQP is srq_pingpong.c's MAX_QP: the number of messages its
// exchange carries each way, whatever its -q.
const SRQMaxQP = 256

// Done is the client's last message: "done" and its NUL.
const Done = "done\x00"

// ZeroWireGID is an all-zero GID in the wire format: what the tools send
// when run without -g (their GID is memset to zero), and ibv_srq_pingpong
// for its unused slots.
const ZeroWireGID = "00000000000000000000000000000000"

// Timeout is how long Dial and Accept give the exchange (the deadline
// they set on the connection).
const Timeout = 30 * time.Second

// Dest is one message: struct pingpong_dest. On RoCE the LID is 0 (the
// port has none). A GID that is not valid goes on the wire as zeros; a
// parsed message always has a valid 16-byte GID (IPv4-mapped ones stay
// mapped).
type Dest struct {
	LID uint16
	fabric.QPInfo
}

// HasGID reports whether d carries a GID as the tools test it
// (dest->gid.global.interface_id, the low 8 bytes, non-zero): without one
// they address the peer with no GRH, which RoCE cannot route.
func (d Dest) HasGID() bool {
	if !d.GID.IsValid() {
		return false
	}
	b := d.GID.As16()
	return [8]byte(b[8:]) != [8]byte{}
}

// Append appends d's message to b: 52 bytes. QPN and PSN are masked to
// their 24 bits.
func (d Dest) Append(b []byte) []byte {
	g := ZeroWireGID
	if d.GID.IsValid() {
		g = ctrl.WireGID(d.GID)
	}
	n := len(b)
	b = fmt.Appendf(b, "%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, g)
	for len(b) < n+MsgSize {
		b = append(b, 0)
	}
	return b[:n+MsgSize]
}

// Marshal returns d's message.
func (d Dest) Marshal() []byte { return d.Append(make([]byte, 0, MsgSize)) }

// ParseDest parses a message as the tools' sscanf("%x:%x:%x:%s") and
// wire_gid_to_gid do: four ':'-separated fields up to the NULs, hex
// digits of either case, LID within 16 bits, QPN and PSN within 24, the
// GID 32 hex digits.
func ParseDest(msg []byte) (Dest, error) {
	s := strings.TrimRight(string(msg), "\x00")
	f := strings.Split(s, ":")
	if len(f) != 4 {
		return Dest{}, fmt.Errorf("pingpong exchange: bad message %q", s)
	}
	lid, err0 := strconv.ParseUint(f[0], 16, 16)
	qpn, err1 := strconv.ParseUint(f[1], 16, 24)
	psn, err2 := strconv.ParseUint(f[2], 16, 24)
	gid, err3 := ctrl.ParseWireGID(f[3])
	if err0 != nil || err1 != nil || err2 != nil || err3 != nil {
		return Dest{}, fmt.Errorf("pingpong exchange: bad message %q", s)
	}
	return Dest{LID: uint16(lid), QPInfo: fabric.QPInfo{QPN: uint32(qpn), PSN: uint32(psn), GID: gid}}, nil
}

// WriteDests writes one message per Dest, all in one write.
func WriteDests(w io.Writer, ds []Dest) error {
	buf := make([]byte, 0, len(ds)*MsgSize)
	for _, d := range ds {
		buf = d.Append(buf)
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("pingpong exchange: %w", err)
	}
	return nil
}

// ReadDests reads and parses n messages.
func ReadDests(r io.Reader, n int) ([]Dest, error) {
	buf := make([]byte, n*MsgSize)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("pingpong exchange: %w", err)
	}
	out := make([]Dest, n)
	for i := range out {
		d, err := ParseDest(buf[i*MsgSize : (i+1)*MsgSize])
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// WriteDone writes the client's "done".
func WriteDone(w io.Writer) error {
	if _, err := io.WriteString(w, Done); err != nil {
		return fmt.Errorf("pingpong exchange: %w", err)
	}
	return nil
}

// ReadDone waits for the client's "done" (its 5 bytes, whatever they
// are, as the server's read() of sizeof "done" takes them).
func ReadDone(r io.Reader) error {
	b := make([]byte, len(Done))
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("pingpong exchange: waiting for done: %w", err)
	}
	return nil
}

// Dial connects to a server (host, or host:port; the port defaults to
// DefaultPort) and gives the connection Timeout for the exchange.
func Dial(ctx context.Context, server string) (net.Conn, error) {
	nc, err := oob.Dial(ctx, server, DefaultPort, "pingpong")
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(Timeout))
	return nc, nil
}

// Accept accepts one client on l and gives the connection Timeout for
// the exchange.
func Accept(l net.Listener) (net.Conn, error) {
	nc, err := l.Accept()
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(Timeout))
	return nc, nil
}

// NtopGID formats a GID as the tools print it, inet_ntop(AF_INET6, gid):
// "::" for none, "::ffff:a.b.c.d" for an IPv4-mapped one.
func NtopGID(g netip.Addr) string {
	if !g.IsValid() {
		return "::"
	}
	return netip.AddrFrom16(g.As16()).String()
}
