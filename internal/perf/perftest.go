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

	"github.com/softfabric/softfabric/device"
)

// The client side of perftest's own out-of-band exchange (linux-rdma
// perftest, src/perftest_communication.c and the ib_*_bw mains), so that
// `softfabric perf` can drive unmodified ib_write_bw, ib_send_bw and
// ib_read_bw servers. Written against perftest 6.06 (Debian's
// 4.5-0.17 package), whose ib_*_bw the rxe lab guest runs.
//
// Everything runs over one TCP connection with fixed-size messages and no
// framing: perftest reads each message with a single read() of exactly its
// size. Every step is symmetric and the client always writes first, then
// reads the server's message of the same size (ctx_xchg_data_ethernet,
// ctx_hand_shake), so at most one message of ours is ever unread.
//
//	versions     16 bytes each way: the VERSION string, NUL padded (MAX_VERSION)
//	sys data     if the peer is >= 5.32: 4 bytes cycle_buffer (page size),
//	             then 4 bytes cache_line_size, both big-endian ints
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
//	write, read  N key messages again, 1 barrier; the test; 1 barrier; the
//	             client's BW report (xchg_bw_reports: 8-byte size, 8-byte
//	             iters (4 before 5.33), bw_peak, bw_avg, msgRate_avg as
//	             big-endian IEEE doubles, bandwidth in MiB/s); 1 closing
//	             barrier (ctx_close_connection). The server prints our report.
//	send         1 barrier, N key messages again, 1 barrier after the server
//	             has posted its receives; the test (the server counts exactly
//	             iters receives); 1 closing barrier. The server prints its own
//	             receive bandwidth.
//
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

// ptConn is the TCP connection to a perftest server.
type ptConn struct {
	c  net.Conn
	to time.Duration
}

// xchg writes msg and reads the peer's message of the same size, the
// client's half of ctx_xchg_data / ctx_hand_shake.
func (c *ptConn) xchg(what string, msg []byte) ([]byte, error) {
	_ = c.c.SetDeadline(time.Now().Add(c.to))
	if _, err := c.c.Write(msg); err != nil {
		return nil, fmt.Errorf("perftest exchange (%s): %w", what, err)
	}
	rem := make([]byte, len(msg))
	if _, err := io.ReadFull(c.c, rem); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("perftest exchange (%s): the server closed the connection (see its output: a parameter it checks may disagree)", what)
		}
		return nil, fmt.Errorf("perftest exchange (%s): %w", what, err)
	}
	return rem, nil
}

// PerftestRun is what a run against a perftest server saw.
type PerftestRun struct {
	Result        Result
	ServerVersion string
	Server        []PerftestQP // the server's queue pairs
}

// PerftestQP is what a perftest server announced for one queue pair.
type PerftestQP struct {
	QPN, PSN, RKey, OutReads uint32
	VA                       uint64
	GID                      netip.Addr
}

// RunPerftest is a perftest BW client (ib_write_bw, ib_send_bw or
// ib_read_bw SERVER) against an unmodified perftest server at server
// (host or host:port, default port 18515). The server's parameters must
// agree with cfg where perftest does not exchange them: -q (QPs), and for
// send -s (at least cfg.Size) and -n (exactly cfg.Iters); write and read
// need cfg.Size no larger than the server's -s. Zero Size and Iters take
// perftest's defaults: 65536 bytes, 5000 iterations for write and 1000 for
// send and read. Connection type RC only,
// one size per run (not -a), no --report-per-port on the server.
func RunPerftest(ctx context.Context, d *device.Device, server string, cfg Config) (PerftestRun, error) {
	var run PerftestRun
	switch cfg.Op {
	case "write", "send", "read":
	default:
		return run, fmt.Errorf("perftest: %q is not a perftest BW test here (want write, send or read)", cfg.Op)
	}
	if cfg.Lat {
		return run, errors.New("perftest: latency tests (ib_*_lat) are not supported, only BW")
	}
	if cfg.Op == "send" && cfg.Duration > 0 {
		return run, errors.New("perftest: ib_send_bw's server counts --iters receives; --duration cannot be used with send")
	}
	if cfg.Size == 0 {
		cfg.Size = 65536 // DEF_SIZE_BW
	}
	if cfg.Iters == 0 {
		cfg.Iters = perftestIters(cfg.Op)
	}
	if err := cfg.check(); err != nil {
		return run, err
	}
	if cfg.MTU == 0 || cfg.MTU > d.ActiveMTU() {
		cfg.MTU = d.ActiveMTU()
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
	c := &ptConn{c: nc, to: 60 * time.Second}

	// exchange_versions
	rem, err := c.xchg("versions", ptVersion(PerftestVersion))
	if err != nil {
		return run, err
	}
	run.ServerVersion = string(bytes.TrimRight(rem, "\x00"))
	if i := strings.IndexByte(run.ServerVersion, 0); i >= 0 {
		run.ServerVersion = run.ServerVersion[:i]
	}
	rv := atof(run.ServerVersion)
	// check_sys_data: the server keeps the larger of each; ours are its
	// defaults (DEF_PAGE_SIZE, DEF_CACHE_LINE_SIZE), so nothing changes.
	if rv >= 5.32 {
		for _, v := range []uint32{ptPageSize, ptCacheLine} {
			if _, err := c.xchg("system data", binary.BigEndian.AppendUint32(nil, v)); err != nil {
				return run, err
			}
		}
	}
	// check_mtu
	if rv >= 5.1 {
		size := 4
		if rv >= 5.31 {
			size = 2
		}
		rem, err := c.xchg("MTU", ptMTUMessage(mtuEnum(cfg.MTU), size))
		if err != nil {
			return run, err
		}
		if e := strtol10(rem); e >= 1 && e <= 5 && 128<<e < cfg.MTU {
			cfg.MTU = 128 << e
		}
	}

	s, err := newSession(d, cfg.QPs, cfg.Size)
	if err != nil {
		return run, err
	}
	defer s.close()
	local, _ := localAddr(nc)
	gid, ok := d.GID(local)
	if !ok {
		return run, fmt.Errorf("no GID for %v on %s", local, d.Name())
	}
	mine := make([]ptDest, cfg.QPs)
	for i, q := range s.qps {
		mine[i] = ptDest{OutReads: ptOutReads, QPN: q.QPN(), PSN: s.psns[i], RKey: s.buf.RKey(), VA: s.buf.Addr(), GID: gid.As16()}
	}
	theirs := make([]ptDest, cfg.QPs)
	for i := range mine {
		rem, err := c.xchg("QP keys", mine[i].marshal())
		if err != nil {
			return run, err
		}
		if theirs[i], err = parsePTDest(rem); err != nil {
			return run, err
		}
	}
	// ctx_check_gid_compatibility: both IPv4-mapped or neither.
	for _, t := range theirs {
		g := netip.AddrFrom16(t.GID)
		run.Server = append(run.Server, PerftestQP{QPN: t.QPN, PSN: t.PSN, RKey: t.RKey, OutReads: t.OutReads, VA: t.VA, GID: g})
		if g.Is4In6() != gid.Is4In6() {
			return run, fmt.Errorf("perftest: the server's GID %v and ours (%v) are not both IPv4 (or both IPv6); pick the server's GID index (-x) to match", g, gid)
		}
	}
	peers := make([]qpInfo, cfg.QPs)
	for i, q := range s.qps {
		t := theirs[i]
		peers[i] = qpInfo{QPN: t.QPN, PSN: t.PSN, GID: netip.AddrFrom16(t.GID), RKey: t.RKey, VA: t.VA}
		// ctx_connect: the initiator depth is the peer's out_reads.
		rd := uint8(min(ptOutReads, max(t.OutReads, 1)))
		r := device.Remote{QPN: t.QPN, PSN: t.PSN, GID: peers[i].GID}
		if err := d.ConnectRC(ctx, q, s.psns[i], r, device.ConnectOptions{PathMTU: cfg.MTU, RdAtomic: rd}); err != nil {
			return run, fmt.Errorf("connecting QP %d: %w", q.QPN(), err)
		}
	}
	barrier := func(what string) error {
		_, err := c.xchg(what, mine[0].marshal())
		return err
	}
	again := func() error {
		for i := range mine {
			if _, err := c.xchg("QP keys again", mine[i].marshal()); err != nil {
				return err
			}
		}
		return nil
	}
	if cfg.Op == "send" {
		if err := barrier("after connect"); err != nil {
			return run, err
		}
		if err := again(); err != nil {
			return run, err
		}
		if err := barrier("receives posted"); err != nil {
			return run, err
		}
	} else {
		if err := again(); err != nil {
			return run, err
		}
		if err := barrier("after RTR"); err != nil {
			return run, err
		}
	}

	res, err := s.run(ctx, cfg, peers)
	if err != nil {
		return run, err
	}
	// Let the last ACKs (and, for read, our last acknowledgement of the
	// responses) settle before the server tears its QPs down.
	drainUntil(d, time.Now().Add(5*time.Millisecond))
	run.Result = res

	if cfg.Op != "send" {
		if err := barrier("end of test"); err != nil {
			return run, err
		}
		const mib = 1 << 20
		rep := ptReport{
			Size: uint64(cfg.Size), Iters: uint64(res.Iters),
			BWPeak: res.BWPeakMBps * 1e6 / mib, BWAvg: res.BWAvgMBps * 1e6 / mib, MsgRate: res.MsgRateMpps,
		}
		for _, m := range rep.messages(rv) {
			if _, err := c.xchg("BW report", m); err != nil {
				return run, err
			}
		}
	}
	// ctx_close_connection
	if err := barrier("close"); err != nil {
		return run, err
	}
	return run, nil
}
