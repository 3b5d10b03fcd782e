package perf

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

// Both sides of perftest's own out-of-band exchange (linux-rdma perftest,
// src/perftest_communication.c and the ib_*_bw mains), so that `softfabric
// perf` can drive unmodified ib_write_bw, ib_read_bw, ib_send_bw and
// ib_atomic_bw servers (RunPerftest) and answer their clients
// (ServePerftest). Written against perftest 6.06 (Debian's 4.5-0.17
// package), whose ib_*_bw the rxe lab guest runs.
//
// Everything runs over one TCP connection with fixed-size messages and no
// framing: perftest reads each message with a single read() of exactly its
// size. Every step is symmetric: the client writes its message, then reads
// the server's of the same size; the server reads first, then writes
// (ctx_xchg_data_ethernet, ctx_hand_shake), so at most one message of
// either side is ever unread.
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
//	             and the terminating NUL
//	connect      both move their QPs to RTS (ctx_connect)
//
// then, the same 108-byte message used as a barrier (ctx_hand_shake, whose
// content the other side overwrites and ignores):
//
//	write, read,   N key messages again, 1 barrier (after RTR). The client
//	atomic         runs every size (-a: 2 B .. 8 MiB, nothing exchanged
//	               between sizes), then 1 barrier and its BW report of the
//	               last size (xchg_bw_reports: 8-byte size, 8-byte iters (4
//	               before 5.33), bw_peak, bw_avg, msgRate_avg as big-endian
//	               IEEE doubles, bandwidth in MiB/s; the server sends its
//	               own, unset, report back). The server prints the client's
//	               report: one line, even with -a.
//	send           1 barrier after connect, N key messages again; then per
//	               size the server posts its receives and 1 barrier, the
//	               test (the server counts iters receives per QP), and with
//	               -a 1 more barrier after each size. The server prints its
//	               own receive bandwidth (peak 0: noPeak) for each size.
//	close          1 barrier, then each side writes "done" and its NUL (5
//	               bytes) and closes (ctx_close_connection).
//
// Each of the -q QPs runs -n iterations (run_iter_bw, run_iter_bw_server),
// and the report's iterations are their total (num_of_calculated_iters).
// The counts were checked against the guest's binaries: ib_write_bw's and
// ib_read_bw's main call ctx_hand_shake from 8 places, ib_send_bw's from 7,
// as the 6.x sources do.

// PerftestVersion is the perftest version this client announces. Servers
// from 5.70 on refuse older peers; the version also selects the message
// formats above on the server's side.
const PerftestVersion = "6.06"

// PerftestDefaultPort is perftest's default TCP port (DEF_PORT).
const PerftestDefaultPort = 18515

const (
	ptVersionSize = 16  // MAX_VERSION
	ptKeySizeGID  = 108 // KEY_MSG_SIZE_GID
	ptPageSize    = 4096
	ptCacheLine   = 64
	// ptOutReads is the out_reads we announce: the responder resources our
	// QPs get (device.ConnectOptions.RdAtomic's default).
	ptOutReads = 16
)

// perftestIters is a perftest BW server's default -n: DEF_ITERS_WB (5000)
// for ib_write_bw, DEF_ITERS (1000) for the others.
func perftestIters(op string) int {
	if op == "write" {
		return 5000
	}
	return 1000
}

// ptDest is perftest's struct pingpong_dest as its key message carries it.
type ptDest struct {
	LID      uint32
	OutReads uint32
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VA       uint64
	GID      [16]byte
	SRQN     uint32
}

// marshal formats d as ethernet_write_keys does with KEY_PRINT_FMT_GID:
// 107 characters and a NUL.
func (d ptDest) marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VA)
	for _, g := range d.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	msg := make([]byte, ptKeySizeGID)
	copy(msg, b.Bytes()) // sprintf into char msg[KEY_MSG_SIZE_GID]: the rest is NUL
	return msg
}

// parsePTDest parses a key message as ethernet_read_keys does: hex fields
// separated by ':', up to the first NUL.
func parsePTDest(msg []byte) (ptDest, error) {
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	// 6 fields, 16 GID bytes, SRQN, and what follows the last ':'.
	if len(f) < 23 {
		return ptDest{}, fmt.Errorf("perftest exchange: bad key message %q", s)
	}
	var d ptDest
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
	for i := range d.GID {
		d.GID[i] = byte(hex(6+i, 8))
	}
	d.SRQN = uint32(hex(22, 32))
	if bad {
		return ptDest{}, fmt.Errorf("perftest exchange: bad key message %q", s)
	}
	return d, nil
}

// ptVersion is a version message: the string, NUL padded to MAX_VERSION.
func ptVersion(v string) []byte {
	msg := make([]byte, ptVersionSize)
	copy(msg[:ptVersionSize-1], v)
	return msg
}

// atof reads the leading decimal number of s as C's atof does (0 when
// there is none), for perftest's version comparisons.
func atof(s string) float64 {
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

// mtuEnum is enum ibv_mtu for a path MTU in bytes (IBV_MTU_256 = 1).
func mtuEnum(mtu int) int {
	for e := 1; e <= 5; e++ {
		if 128<<e == mtu {
			return e
		}
	}
	return 0
}

// ptMTUMessage is check_mtu's message: sprintf("%d", curr_mtu) in a
// buffer of size bytes, NUL padded.
func ptMTUMessage(enum, size int) []byte {
	msg := make([]byte, size)
	copy(msg[:size-1], strconv.Itoa(enum))
	return msg
}

// strtol10 reads a leading decimal integer as strtol(s, NULL, 10) does.
func strtol10(b []byte) int {
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

// ptReport is perftest's struct bw_report_data as xchg_bw_reports sends it.
type ptReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64 // MiB/s (or Gb/s for a server run with --report_gbits)
	BWAvg   float64
	MsgRate float64 // Mpps
}

// messages returns the report's fields in xchg_bw_reports' order, each
// exchanged on its own: hton_long / hton_double are 64-bit byte swaps on a
// little-endian host, i.e. big-endian on the wire; iters is 4 bytes for a
// peer older than 5.33.
func (r ptReport) messages(remote float64) [][]byte {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	iters := u64(r.Iters)
	if remote < 5.33 {
		iters = binary.BigEndian.AppendUint32(nil, uint32(r.Iters))
	}
	return [][]byte{u64(r.Size), iters, u64(math.Float64bits(r.BWPeak)), u64(math.Float64bits(r.BWAvg)), u64(math.Float64bits(r.MsgRate))}
}

// ptConn is one end of perftest's TCP connection.
type ptConn struct {
	c      net.Conn
	ctx    context.Context
	to     time.Duration // for each message of the exchange
	server bool          // reads each message first, then writes its own
}

// ptMsg is a message read in the background.
type ptMsg struct {
	b   []byte
	err error
}

func (c *ptConn) peer() string {
	if c.server {
		return "client"
	}
	return "server"
}

func (c *ptConn) fail(what string, err error) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("perftest exchange (%s): %w", what, c.ctx.Err())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("perftest exchange (%s): the %s closed the connection (see its output: a parameter it checks may disagree)", what, c.peer())
	}
	return fmt.Errorf("perftest exchange (%s): %w", what, err)
}

// deadline sets the connection's deadline to to from now (none for 0).
// The context's end sets it to now (see dialPerftest, ServePerftest); a
// context that ended before this call is caught here, one that ends after
// it overrides it.
func (c *ptConn) deadline(set func(time.Time) error, to time.Duration) error {
	var t time.Time
	if to > 0 {
		t = time.Now().Add(to)
	}
	_ = set(t)
	return c.ctx.Err()
}

// read reads a message of exactly n bytes, giving up after to (0: only
// when the context ends).
func (c *ptConn) read(what string, n int, to time.Duration) ([]byte, error) {
	if err := c.deadline(c.c.SetReadDeadline, to); err != nil {
		return nil, c.fail(what, err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.c, b); err != nil {
		return nil, c.fail(what, err)
	}
	return b, nil
}

// write writes msg in one write(), as perftest does.
func (c *ptConn) write(what string, msg []byte) error {
	if err := c.deadline(c.c.SetWriteDeadline, c.to); err != nil {
		return c.fail(what, err)
	}
	if _, err := c.c.Write(msg); err != nil {
		return c.fail(what, err)
	}
	return nil
}

// readAsync reads the peer's next message of n bytes in the background,
// for a side that must keep its device running meanwhile.
func (c *ptConn) readAsync(what string, n int, to time.Duration) <-chan ptMsg {
	ch := make(chan ptMsg, 1)
	go func() {
		b, err := c.read(what, n, to)
		ch <- ptMsg{b, err}
	}()
	return ch
}

// xchg is one ctx_xchg_data / ctx_hand_shake step: the client writes msg
// and reads the peer's message of the same size, the server reads first.
func (c *ptConn) xchg(what string, msg []byte) ([]byte, error) {
	if c.server {
		rem, err := c.read(what, len(msg), c.to)
		if err != nil {
			return nil, err
		}
		return rem, c.write(what, msg)
	}
	if err := c.write(what, msg); err != nil {
		return nil, err
	}
	return c.read(what, len(msg), c.to)
}

// ptPrelude is what exchange_versions, check_sys_data and check_mtu agree.
type ptPrelude struct {
	version string  // the peer's VERSION
	rv      float64 // atof(version), as perftest compares versions
	mtu     int     // the path MTU both sides use
	cycle   int     // cycle_buffer: the larger of the two page sizes
}

// prelude runs exchange_versions, check_sys_data and check_mtu, offering
// mtu. perftest compares the peer's version with atof in some places and
// strverscmp in others (check_mtu); both agree for every released version
// from 5.31 on, which all send the 2-byte MTU message.
func (c *ptConn) prelude(mtu int) (ptPrelude, error) {
	p := ptPrelude{mtu: mtu, cycle: ptPageSize}
	rem, err := c.xchg("versions", ptVersion(PerftestVersion))
	if err != nil {
		return p, err
	}
	p.version = cString(rem)
	p.rv = atof(p.version)
	// check_sys_data: each keeps the larger; ours are perftest's defaults
	// (DEF_PAGE_SIZE, DEF_CACHE_LINE_SIZE). The cycle buffer bounds where
	// the peer's requests land in our buffer.
	if p.rv >= 5.32 {
		for i, v := range []uint32{ptPageSize, ptCacheLine} {
			rem, err := c.xchg("system data", binary.BigEndian.AppendUint32(nil, v))
			if err != nil {
				return p, err
			}
			if r := int(int32(binary.BigEndian.Uint32(rem))); i == 0 && r > p.cycle && r <= 1<<30 {
				p.cycle = r
			}
		}
	}
	if p.rv >= 5.1 {
		size := 4
		if p.rv >= 5.31 {
			size = 2
		}
		rem, err := c.xchg("MTU", ptMTUMessage(mtuEnum(mtu), size))
		if err != nil {
			return p, err
		}
		if e := strtol10(rem); e >= 1 && e <= 5 && 128<<e < p.mtu {
			p.mtu = 128 << e
		}
	}
	return p, nil
}

// cString is the C string at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// keys exchanges one key message per QP (the loops of ctx_hand_shake over
// my_dest[i] in the mains) and parses the peer's, as ethernet_read_keys
// does each time.
func (c *ptConn) keys(what string, mine []ptDest) ([]ptDest, error) {
	theirs := make([]ptDest, len(mine))
	for i := range mine {
		rem, err := c.xchg(what, mine[i].marshal())
		if err != nil {
			return nil, err
		}
		if theirs[i], err = parsePTDest(rem); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return theirs, nil
}

// ptDone is what ctx_close_connection writes after its last hand-shake:
// write(sockfd, "done", sizeof "done").
var ptDone = []byte("done\x00")

// finish is ctx_close_connection after its hand-shake: "done" both ways.
// perftest never reads the peer's; we do (briefly), so that closing with
// it unread does not reset the connection under a peer still writing.
func (c *ptConn) finish() {
	_ = c.write("close", ptDone)
	if c.deadline(c.c.SetReadDeadline, time.Second) == nil {
		_, _ = io.ReadFull(c.c, make([]byte, len(ptDone)))
	}
}

// checkGIDs is ctx_check_gid_compatibility: both GIDs IPv4-mapped or
// neither.
func checkGIDs(mine netip.Addr, theirs []ptDest, peer string) error {
	for _, t := range theirs {
		if g := netip.AddrFrom16(t.GID); g.Is4In6() != mine.Is4In6() {
			return fmt.Errorf("perftest: the %s's GID %v and ours (%v) are not both IPv4 (or both IPv6); pick the %s's GID index (-x) to match", peer, g, mine, peer)
		}
	}
	return nil
}

func perftestQPs(ds []ptDest) []PerftestQP {
	out := make([]PerftestQP, len(ds))
	for i, t := range ds {
		out[i] = PerftestQP{QPN: t.QPN, PSN: t.PSN, RKey: t.RKey, OutReads: t.OutReads, VA: t.VA, GID: netip.AddrFrom16(t.GID)}
	}
	return out
}

// PerftestConfig is a perftest BW test as both ends must agree on it:
// perftest exchanges none of these, so each side's must match the other's
// command line (-s, -n, -q, -a, -A).
type PerftestConfig struct {
	Op    string // write, read, send or atomic (ib_write_bw ...)
	Size  int    // -s; 0: DEF_SIZE_BW, 65536 (atomic: always 8)
	Iters int    // -n, per queue pair; 0: 5000 for write, 1000 for the others
	QPs   int    // -q; 0: 1
	MTU   int    // largest path MTU to offer (-m); 0: the device's active MTU
	// All is -a: every size from 2 to 2^23 bytes, the size doubling
	// (write, read and send only: perftest refuses it for atomics).
	All bool
	// CmpSwap is -A CMP_AND_SWAP: the atomic test's operation instead of
	// FETCH_AND_ADD.
	CmpSwap bool
	// Duration runs a write, read or atomic client for this long instead
	// of Iters.
	Duration time.Duration

	allMax int // tests: -a's largest size instead of perftest's 2^23
}

// ptMaxSize is MAX_SIZE, -a's largest message.
const ptMaxSize = 1 << 23

func (cfg *PerftestConfig) check() error {
	switch cfg.Op {
	case "write", "read", "send", "atomic":
	default:
		return fmt.Errorf("perftest: %q is not a perftest BW test (want write, read, send or atomic)", cfg.Op)
	}
	if cfg.Op == "atomic" {
		if cfg.Size != 0 && cfg.Size != 8 {
			return errors.New("perftest: atomic operations are 8 bytes (ib_atomic_bw has no -s)")
		}
		if cfg.All {
			return errors.New("perftest: ib_atomic_bw has no -a (its messages are 8 bytes)")
		}
		cfg.Size = 8 // DEF_SIZE_ATOMIC
	} else if cfg.CmpSwap {
		return errors.New("perftest: -A (CMP_AND_SWAP) is for the atomic test")
	}
	if cfg.Size == 0 {
		cfg.Size = 65536 // DEF_SIZE_BW
	}
	if cfg.All {
		cfg.Size = ptMaxSize // force_dependecies
		if cfg.allMax > 0 {
			cfg.Size = cfg.allMax
		}
	}
	if cfg.Size < 1 || cfg.Size > 1<<30 {
		return fmt.Errorf("perftest: size %d outside 1 B..1 GiB", cfg.Size)
	}
	if cfg.Iters == 0 {
		cfg.Iters = perftestIters(cfg.Op)
	}
	if cfg.Iters < 5 || cfg.Iters > 100000000 {
		return fmt.Errorf("perftest: iterations %d outside perftest's %d..%d (MIN_ITER, MAX_ITER)", cfg.Iters, 5, 100000000)
	}
	if cfg.QPs == 0 {
		cfg.QPs = 1
	}
	if cfg.QPs < 1 || cfg.QPs > 64 {
		return fmt.Errorf("perftest: %d QPs outside 1..64", cfg.QPs)
	}
	if cfg.Duration < 0 || cfg.Duration > 0 && (cfg.Op == "send" || cfg.All) {
		return errors.New("perftest: --duration is for write, read and atomic at one size (ib_send_bw's server counts -n receives)")
	}
	return nil
}

// sizes are the message sizes of the test in order.
func (cfg *PerftestConfig) sizes() []int {
	if !cfg.All {
		return []int{cfg.Size}
	}
	var out []int
	for s := 2; s <= cfg.Size; s *= 2 {
		out = append(out, s)
	}
	return out
}

// PerftestLine is one row of perftest's BW table (print_full_bw_report):
// bandwidth in MiB/s, which perftest labels MB/sec.
type PerftestLine struct {
	Bytes   uint64  `json:"bytes"`
	Iters   uint64  `json:"iterations"`
	BWPeak  float64 `json:"bw_peak_mib_s"`
	BWAvg   float64 `json:"bw_avg_mib_s"`
	MsgRate float64 `json:"msg_rate_mpps"`
}

// PerftestOutcome is what one side of a perftest BW test saw: the peer's
// version and queue pairs, the path MTU both sides agreed, and the
// measurements.
type PerftestOutcome struct {
	PeerVersion string
	Peer        []PerftestQP // the peer's queue pairs
	MTU         int
	// Lines are the rows perftest prints on this side. A client measures
	// one per size (the server was sent the last one). A server prints,
	// for write, read and atomic, the client's own report (one, of its
	// last size, even with -a), and for send the receive bandwidth it
	// measured, per size.
	Lines []PerftestLine
	// Results are the lines in softfabric's units, for --json; a send
	// server's have Received set.
	Results []Result
}

// PerftestQP is what a perftest peer announced for one queue pair.
type PerftestQP struct {
	QPN, PSN, RKey, OutReads uint32
	VA                       uint64
	GID                      netip.Addr
}

// RunPerftest is a perftest BW client (ib_write_bw, ib_read_bw,
// ib_send_bw or ib_atomic_bw SERVER) against an unmodified perftest
// server, or ServePerftest, at server (host or host:port, default port
// 18515). The server's command line must agree with cfg where perftest
// does not exchange it: -q, -a, and for send -s and -n; write and read
// need a Size no larger than the server's -s. Connection type RC only, no
// --report-per-port or -b on the server.
func RunPerftest(ctx context.Context, d *Device, server string, cfg PerftestConfig) (PerftestOutcome, error) {
	var run PerftestOutcome
	if err := cfg.check(); err != nil {
		return run, err
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, strconv.Itoa(PerftestDefaultPort))
	}
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", server)
	if err != nil {
		return run, fmt.Errorf("connecting to the perftest server: %w", err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	c := &ptConn{c: nc, ctx: ctx, to: 60 * time.Second}
	local, _ := localAddr(nc)
	fb, err := d.open(ctx, local, fabric.EPMsg, fabric.ProgressManual, 2*ptTxDepth, 16)
	if err != nil {
		return run, err
	}
	defer fb.close()
	if cfg.MTU == 0 || cfg.MTU > fb.dom.ActiveMTU() {
		cfg.MTU = fb.dom.ActiveMTU()
	}

	p, err := c.prelude(cfg.MTU)
	if err != nil {
		return run, err
	}
	run.PeerVersion, run.MTU = p.version, p.mtu

	s, err := openSession(fb, cfg.QPs, cfg.Size, cfg.Op != "atomic")
	if err != nil {
		return run, err
	}
	defer s.close()
	gid, err := fb.gid()
	if err != nil {
		return run, err
	}
	mine := make([]ptDest, cfg.QPs)
	for i, q := range s.infos(gid) {
		mine[i] = ptDest{OutReads: ptOutReads, QPN: q.QPN, PSN: q.PSN, RKey: q.RKey, VA: q.VA, GID: gid.As16()}
	}
	theirs, err := c.keys("QP keys", mine)
	if err != nil {
		return run, err
	}
	run.Peer = perftestQPs(theirs)
	if err := checkGIDs(gid, theirs, "server"); err != nil {
		return run, err
	}
	peers := make([]qpInfo, cfg.QPs)
	for i, ep := range s.eps {
		t := theirs[i]
		peers[i] = qpInfo{QPN: t.QPN, PSN: t.PSN, GID: netip.AddrFrom16(t.GID), RKey: t.RKey, VA: t.VA}
		// ctx_connect: the initiator depth is the peer's out_reads.
		rd := uint8(min(ptOutReads, max(t.OutReads, 1)))
		r := fabric.QPInfo{QPN: t.QPN, PSN: t.PSN, GID: peers[i].GID}
		if err := ep.ConnectQP(ctx, r, fabric.QPOptions{PathMTU: p.mtu, RdAtomic: rd}); err != nil {
			return run, fmt.Errorf("connecting QP %d: %w", mine[i].QPN, err)
		}
	}
	barrier := func(what string) error {
		rem, err := c.xchg(what, mine[0].marshal())
		if err == nil {
			_, err = parsePTDest(rem)
		}
		return err
	}
	send := cfg.Op == "send"
	if send {
		if err := barrier("after connect"); err != nil {
			return run, err
		}
		if _, err := c.keys("QP keys again", mine); err != nil {
			return run, err
		}
	} else {
		if _, err := c.keys("QP keys again", mine); err != nil {
			return run, err
		}
		if err := barrier("after RTR"); err != nil {
			return run, err
		}
	}

	for _, size := range cfg.sizes() {
		if send {
			// The server has posted its receives for this size.
			if err := barrier(fmt.Sprintf("receives posted (%d bytes)", size)); err != nil {
				return run, err
			}
		}
		res, line, err := s.ptRun(ctx, cfg, size, p.mtu, peers)
		if err != nil {
			return run, err
		}
		run.Results = append(run.Results, res)
		run.Lines = append(run.Lines, line)
		if send && cfg.All {
			if err := barrier(fmt.Sprintf("after %d bytes", size)); err != nil {
				return run, err
			}
		}
	}
	// Let the last ACKs (and, for read, our last acknowledgement of the
	// responses) settle before the server tears its QPs down.
	fb.drainUntil(time.Now().Add(5 * time.Millisecond))

	if !send {
		if err := barrier("end of test"); err != nil {
			return run, err
		}
		last := run.Lines[len(run.Lines)-1]
		rep := ptReport{Size: last.Bytes, Iters: last.Iters, BWPeak: last.BWPeak, BWAvg: last.BWAvg, MsgRate: last.MsgRate}
		for _, m := range rep.messages(p.rv) {
			if _, err := c.xchg("BW report", m); err != nil {
				return run, err
			}
		}
	}
	if err := barrier("close"); err != nil {
		return run, err
	}
	c.finish()
	return run, nil
}
