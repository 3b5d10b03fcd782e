// Package perftest speaks linux-rdma perftest's out-of-band exchange
// (src/perftest_communication.c and the ib_*_bw mains), so that a client
// of package fabric can drive unmodified ib_write_bw, ib_read_bw,
// ib_send_bw and ib_atomic_bw servers and answer their clients. Written
// against perftest 6.06 (Debian's 4.5-0.17 package).
//
// Everything runs over one TCP connection with fixed-size messages and no
// framing: perftest reads each message with a single read() of exactly its
// size. Every step is symmetric: the client writes its message, then reads
// the server's of the same size; the server reads first, then writes
// (ctx_xchg_data_ethernet, ctx_hand_shake), so at most one message of
// either side is ever unread. Conn.Xchg is one such step.
//
//	versions     16 bytes each way: the VERSION string, NUL padded (MAX_VERSION)
//	sys data     if the peer is >= 5.32: 4 bytes cycle_buffer (page size),
//	             then 4 bytes cache_line_size, both big-endian ints; each
//	             side keeps the larger (check_sys_data)
//	MTU          if the peer is >= 5.1: sprintf("%d", enum ibv_mtu) in 2 bytes
//	             (4 before 5.31); each side takes the smaller valid one
//	keys         one KEY_MSG_SIZE_GID (108-byte) message per QP:
//	             "%04x:%04x:%06x:%06x:%08x:%016llx:" LID, out_reads, QPN, PSN,
//	             rkey, VA, then the 16 GID bytes as "%02x:", then "%08x:" SRQN
//	             and the terminating NUL (ethernet_write_keys, KEY_PRINT_FMT_GID)
//	connect      both move their QPs to RTS (ctx_connect)
//
// Conn.Prelude runs the first three steps, Conn.Keys the fourth. Then the
// same 108-byte message serves as a barrier (ctx_hand_shake, whose content
// the other side overwrites and ignores; Conn.Barrier):
//
//	write, read,   N key messages again, 1 barrier (after RTR). The client
//	atomic         runs every size (-a: 2 B .. 8 MiB, nothing exchanged
//	               between sizes), then 1 barrier and its BW report of the
//	               last size (xchg_bw_reports: 8-byte size, 8-byte iters (4
//	               before 5.33), bw_peak, bw_avg, msgRate_avg as big-endian
//	               IEEE doubles, bandwidth in MiB/s; the server sends its
//	               own, unset, report back; Report). The server prints the
//	               client's report: one line, even with -a.
//	send           1 barrier after connect, N key messages again; then per
//	               size the server posts its receives and 1 barrier, the
//	               test (the server counts iters receives per QP), and with
//	               -a 1 more barrier after each size. The server prints its
//	               own receive bandwidth (peak 0: noPeak) for each size.
//	close          1 barrier, then each side writes "done" and its NUL (5
//	               bytes) and closes (ctx_close_connection; Conn.Finish).
//
// The counts were checked against the guest's binaries: ib_write_bw's and
// ib_read_bw's main call ctx_hand_shake from 8 places, ib_send_bw's from 7,
// as the 6.x sources do.
//
// perftest's RDMA-CM mode (-R) runs the same steps over an RDMA-CM
// connection instead (MsgConn, Conn.CM), with binary key messages and two
// more barriers around the test QPs' own RDMA-CM connections: cm.go.
package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// Version is the perftest version this side announces. Servers from 5.70
// on refuse older peers; the version also selects the message formats
// above on the server's side.
const Version = "6.06"

// DefaultPort is perftest's default TCP port (DEF_PORT).
const DefaultPort = 18515

const (
	VersionSize = 16   // MAX_VERSION: a version message
	KeyMsgSize  = 108  // KEY_MSG_SIZE_GID: a key message
	PageSize    = 4096 // DEF_PAGE_SIZE: the cycle buffer we announce
	CacheLine   = 64   // DEF_CACHE_LINE_SIZE
)

// Done is what ctx_close_connection writes after its last hand-shake:
// write(sockfd, "done", sizeof "done").
const Done = "done\x00"

// Dest is perftest's struct pingpong_dest as its key message carries it.
// A GID that is not valid goes on the wire as zeros; a parsed one is
// always a valid 16-byte address.
type Dest struct {
	LID      uint32
	OutReads uint32
	fabric.QPInfo
	RKey uint32
	VA   uint64
	SRQN uint32
}

// Marshal formats d as ethernet_write_keys does with KEY_PRINT_FMT_GID
// into char msg[KEY_MSG_SIZE_GID]: 107 characters and NULs, 108 bytes.
func (d Dest) Marshal() []byte {
	msg := make([]byte, 0, KeyMsgSize)
	msg = fmt.Appendf(msg, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VA)
	var g [16]byte
	if d.GID.IsValid() {
		g = d.GID.As16()
	}
	for _, b := range g {
		msg = fmt.Appendf(msg, "%02x:", b)
	}
	msg = fmt.Appendf(msg, "%08x:", d.SRQN)
	for len(msg) < KeyMsgSize {
		msg = append(msg, 0) // the rest of msg is NUL
	}
	return msg[:KeyMsgSize]
}

// ParseDest parses a key message as ethernet_read_keys does: hex fields
// separated by ':', up to the first NUL; the QPN and PSN within 24 bits.
func ParseDest(msg []byte) (Dest, error) {
	s := CString(msg)
	f := strings.Split(s, ":")
	// 6 fields, 16 GID bytes, SRQN, and what follows the last ':'.
	if len(f) < 23 {
		return Dest{}, fmt.Errorf("perftest exchange: bad key message %q", s)
	}
	var d Dest
	bad := false
	hex := func(i, bits int) uint64 {
		v, err := strconv.ParseUint(f[i], 16, bits)
		bad = bad || err != nil
		return v
	}
	d.LID = uint32(hex(0, 32))
	d.OutReads = uint32(hex(1, 32))
	d.QPN = uint32(hex(2, 24))
	d.PSN = uint32(hex(3, 24))
	d.RKey = uint32(hex(4, 32))
	d.VA = hex(5, 64)
	var g [16]byte
	for i := range g {
		g[i] = byte(hex(6+i, 8))
	}
	d.GID = netip.AddrFrom16(g)
	d.SRQN = uint32(hex(22, 32))
	if bad {
		return Dest{}, fmt.Errorf("perftest exchange: bad key message %q", s)
	}
	return d, nil
}

// VersionMsg is a version message: v, NUL padded to MAX_VERSION (strncpy
// into char version[MAX_VERSION], the last byte always NUL).
func VersionMsg(v string) []byte {
	msg := make([]byte, VersionSize)
	copy(msg[:VersionSize-1], v)
	return msg
}

// Atof reads the leading decimal number of s as C's atof does (0 when
// there is none), as perftest compares versions.
func Atof(s string) float64 {
	s = strings.TrimLeft(s, " \t\n")
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot || end == 0 && (s[0] == '+' || s[0] == '-')) {
		if s[end] == '.' {
			dot = true
		}
		end++
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return v
}

// MTUEnum is enum ibv_mtu for a path MTU in bytes (IBV_MTU_256 = 1), 0 for
// none.
func MTUEnum(mtu int) int {
	for e := 1; e <= 5; e++ {
		if 128<<e == mtu {
			return e
		}
	}
	return 0
}

// MTUMsg is check_mtu's message: sprintf("%d", curr_mtu) in a buffer of
// size bytes (2 from 5.31 on, 4 before), NUL padded.
func MTUMsg(enum, size int) []byte {
	msg := make([]byte, size)
	copy(msg[:size-1], strconv.Itoa(enum))
	return msg
}

// ParseMTUMsg reads check_mtu's message as strtol(s, NULL, 10) does: the
// leading decimal integer, 0 for none (its caller ignores values outside
// 1..5).
func ParseMTUMsg(b []byte) int {
	n, i := 0, 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9' && n < 1<<20; i++ {
		n = n*10 + int(b[i]-'0')
	}
	if neg {
		return -n
	}
	return n
}

// CString is the C string at the start of b.
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Report is perftest's struct bw_report_data as xchg_bw_reports sends it.
type Report struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64 // MiB/s (or Gb/s for a server run with --report_gbits)
	BWAvg   float64
	MsgRate float64 // Mpps
}

// ReportSizes are the sizes of the report's five messages for a peer of
// version remote (Atof): iters is 4 bytes before 5.33.
func ReportSizes(remote float64) [5]int {
	if remote < 5.33 {
		return [5]int{8, 4, 8, 8, 8}
	}
	return [5]int{8, 8, 8, 8, 8}
}

// Messages returns the report's fields in xchg_bw_reports' order, each
// exchanged on its own: hton_long / hton_double are 64-bit byte swaps on a
// little-endian host, i.e. big-endian on the wire; iters is 4 bytes for a
// peer older than 5.33.
func (r Report) Messages(remote float64) [][]byte {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	iters := u64(r.Iters)
	if remote < 5.33 {
		iters = binary.BigEndian.AppendUint32(nil, uint32(r.Iters))
	}
	return [][]byte{u64(r.Size), iters, u64(math.Float64bits(r.BWPeak)), u64(math.Float64bits(r.BWAvg)), u64(math.Float64bits(r.MsgRate))}
}

// ParseReport reads the five messages of Messages (any version's sizes:
// each 4 or 8 bytes).
func ParseReport(f [][]byte) (Report, error) {
	if len(f) != 5 {
		return Report{}, fmt.Errorf("perftest exchange: a BW report has 5 messages, not %d", len(f))
	}
	var v [5]uint64
	for i, b := range f {
		switch {
		case len(b) == 8:
			v[i] = binary.BigEndian.Uint64(b)
		case len(b) == 4 && i == 1:
			v[i] = uint64(binary.BigEndian.Uint32(b))
		default:
			return Report{}, fmt.Errorf("perftest exchange: BW report field %d of %d bytes", i, len(b))
		}
	}
	return Report{Size: v[0], Iters: v[1], BWPeak: math.Float64frombits(v[2]), BWAvg: math.Float64frombits(v[3]), MsgRate: math.Float64frombits(v[4])}, nil
}

// ErrPeerClosed is a step of the exchange that found the connection
// closed by the peer.
var ErrPeerClosed = errors.New("closed the connection")

// Conn is one end of perftest's TCP connection.
type Conn struct {
	C   net.Conn
	Ctx context.Context
	// Timeout bounds each message of the exchange (Xchg, Write).
	Timeout time.Duration
	// Server: this end reads each message first, then writes its own.
	Server bool
	// CM: perftest's RDMA-CM mode (-R): C is a MsgConn, key messages are
	// binary (cm.go) and the close sends no "done".
	CM bool
}

// Msg is a message read in the background (ReadAsync).
type Msg struct {
	B   []byte
	Err error
}

func (c *Conn) peer() string {
	if c.Server {
		return "client"
	}
	return "server"
}

// Fail is err, of the step what, as the exchange reports it: the
// context's end, the peer closing the connection, or err itself.
func (c *Conn) Fail(what string, err error) error {
	if c.Ctx.Err() != nil {
		return fmt.Errorf("perftest exchange (%s): %w", what, c.Ctx.Err())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("perftest exchange (%s): the %s %w (see its output: a parameter it checks may disagree)", what, c.peer(), ErrPeerClosed)
	}
	return fmt.Errorf("perftest exchange (%s): %w", what, err)
}

// deadline sets the connection's deadline to to from now (none for 0).
// The caller sets it to now when the context ends (context.AfterFunc); a
// context that ended before this call is caught here, one that ends after
// it overrides it.
func (c *Conn) deadline(set func(time.Time) error, to time.Duration) error {
	var t time.Time
	if to > 0 {
		t = time.Now().Add(to)
	}
	_ = set(t)
	return c.Ctx.Err()
}

// Read reads a message of exactly n bytes, giving up after to (0: only
// when the context ends); what names the step in errors.
func (c *Conn) Read(what string, n int, to time.Duration) ([]byte, error) {
	if err := c.deadline(c.C.SetReadDeadline, to); err != nil {
		return nil, c.Fail(what, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.C, b); err != nil {
		return nil, c.Fail(what, err)
	}
	return b, nil
}

// Write writes msg in one write(), as perftest does.
func (c *Conn) Write(what string, msg []byte) error {
	if err := c.deadline(c.C.SetWriteDeadline, c.Timeout); err != nil {
		return c.Fail(what, err)
	}
	if _, err := c.C.Write(msg); err != nil {
		return c.Fail(what, err)
	}
	return nil
}

// ReadAsync reads the peer's next message of n bytes in the background,
// for a side that must keep its device running meanwhile.
func (c *Conn) ReadAsync(what string, n int, to time.Duration) <-chan Msg {
	ch := make(chan Msg, 1)
	go func() {
		b, err := c.Read(what, n, to)
		ch <- Msg{b, err}
	}()
	return ch
}

// Xchg is one ctx_xchg_data / ctx_hand_shake step: the client writes msg
// and reads the peer's message of the same size, the server reads first.
func (c *Conn) Xchg(what string, msg []byte) ([]byte, error) {
	if c.Server {
		rem, err := c.Read(what, len(msg), c.Timeout)
		if err != nil {
			return nil, err
		}
		return rem, c.Write(what, msg)
	}
	if err := c.Write(what, msg); err != nil {
		// perftest's server answers only once it has our message. Over
		// RDMA-CM the answer can be in while our send still waits for an
		// ACK that was lost, and a server done with the test disconnects
		// as soon as its answer completes: our send then fails though the
		// server had it. The answer, received, is the step done.
		if c.CM && errors.Is(err, ErrPeerClosed) {
			if rem, rerr := c.Read(what, len(msg), c.Timeout); rerr == nil {
				return rem, nil
			}
		}
		return nil, err
	}
	return c.Read(what, len(msg), c.Timeout)
}

// Prelude is what exchange_versions, check_sys_data and check_mtu agree.
type Prelude struct {
	Version string  // the peer's VERSION
	RV      float64 // Atof(Version), as perftest compares versions
	MTU     int     // the path MTU both sides use
	Cycle   int     // cycle_buffer: the larger of the two page sizes
}

// Prelude runs exchange_versions, check_sys_data and check_mtu, offering
// mtu. perftest compares the peer's version with atof in some places and
// strverscmp in others (check_mtu); both agree for every released version
// from 5.31 on, which all send the 2-byte MTU message.
func (c *Conn) Prelude(mtu int) (Prelude, error) {
	p := Prelude{MTU: mtu, Cycle: PageSize}
	rem, err := c.Xchg("versions", VersionMsg(Version))
	if err != nil {
		return p, err
	}
	p.Version = CString(rem)
	p.RV = Atof(p.Version)
	// check_sys_data: each keeps the larger; ours are perftest's defaults
	// (DEF_PAGE_SIZE, DEF_CACHE_LINE_SIZE). The cycle buffer bounds where
	// the peer's requests land in our buffer.
	if p.RV >= 5.32 {
		for i, v := range []uint32{PageSize, CacheLine} {
			rem, err := c.Xchg("system data", binary.BigEndian.AppendUint32(nil, v))
			if err != nil {
				return p, err
			}
			if r := int(int32(binary.BigEndian.Uint32(rem))); i == 0 && r > p.Cycle && r <= 1<<30 {
				p.Cycle = r
			}
		}
	}
	if p.RV >= 5.1 {
		size := 4
		if p.RV >= 5.31 {
			size = 2
		}
		rem, err := c.Xchg("MTU", MTUMsg(MTUEnum(mtu), size))
		if err != nil {
			return p, err
		}
		if e := ParseMTUMsg(rem); e >= 1 && e <= 5 && 128<<e < p.MTU {
			p.MTU = 128 << e
		}
	}
	return p, nil
}

// Keys exchanges one key message per QP (the loops of ctx_hand_shake over
// my_dest[i] in the mains) and parses the peer's, as ethernet_read_keys
// does each time.
func (c *Conn) Keys(what string, mine []Dest) ([]Dest, error) {
	theirs := make([]Dest, len(mine))
	for i := range mine {
		rem, err := c.Xchg(what, c.MarshalKey(mine[i]))
		if err != nil {
			return nil, err
		}
		if theirs[i], err = c.ParseKey(rem); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return theirs, nil
}

// Barrier is one ctx_hand_shake used as a barrier: me's key message each
// way, the peer's parsed (and ignored).
func (c *Conn) Barrier(what string, me Dest) error {
	rem, err := c.Xchg(what, c.MarshalKey(me))
	if err == nil {
		_, err = c.ParseKey(rem)
	}
	return err
}

// ExchangeReport is the client's half of xchg_bw_reports: each of r's
// messages for a peer of version remote, and the peer's answer (ignored).
func (c *Conn) ExchangeReport(r Report, remote float64) error {
	for _, m := range r.Messages(remote) {
		if _, err := c.Xchg("BW report", m); err != nil {
			return err
		}
	}
	return nil
}

// Finish is ctx_close_connection after its hand-shake: "done" both ways.
// perftest never reads the peer's; Finish does (for a second at most), so
// that closing with it unread does not reset the connection under a peer
// still writing.
func (c *Conn) Finish() {
	if c.CM {
		return // ctx_close_connection writes "done" only over TCP
	}
	_ = c.Write("close", []byte(Done))
	if c.deadline(c.C.SetReadDeadline, time.Second) == nil {
		_, _ = io.ReadFull(c.C, make([]byte, len(Done)))
	}
}

// CheckGIDs is ctx_check_gid_compatibility: mine and every GID of theirs
// both IPv4-mapped or neither; peer ("client" or "server") names the other
// side in the error.
func CheckGIDs(mine netip.Addr, theirs []Dest, peer string) error {
	for _, t := range theirs {
		if g := t.GID; g.Is4In6() != mine.Is4In6() {
			return fmt.Errorf("perftest: the %s's GID %v and ours (%v) are not both IPv4 (or both IPv6); pick the %s's GID index (-x) to match", peer, g, mine, peer)
		}
	}
	return nil
}
