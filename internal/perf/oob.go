package perf

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The out-of-band exchange runs over TCP, one text line per message, the
// way perftest and ibv_rc_pingpong exchange QPN/PSN/GID before they start.
// Our own format for now:
//
//	client → server  SFPERF/1 op=write size=65536 qps=1 iters=5000 lat=0 mtu=1024 cpu=1
//	server → client  OK | ERR <reason>
//	both ways        QP <qpn> <psn> <gid> <rkey> <va>   (hex; one line per QP, client first)
//	server → client  READY
//	client → server  DONE
//	server → client  STATS <messages received> [<cpu user ns> <cpu sys ns>]
//	                 (baselines: STATS <frames> <bytes> <ns first to last> [<cpu user ns> <cpu sys ns>])
//
// The server's CPU time on STATS goes only to a client that asked for it
// with cpu=1: clients from before it read STATS by its number of fields.
// Servers from before it ignore cpu=1 (an unknown numeric parameter) and
// send STATS without it, which clients take as "server CPU unknown".

const protoVersion = "SFPERF/1"

// DefaultPort is the TCP port of the exchange, perftest's default.
const DefaultPort = 18515

type conn struct {
	c  net.Conn
	r  *bufio.Reader
	to time.Duration
	// cpu: the client of the current test asked for the server's CPU
	// time on STATS.
	cpu bool
}

func newConn(c net.Conn) *conn {
	return &conn{c: c, r: bufio.NewReader(c), to: 30 * time.Second}
}

func (c *conn) send(format string, a ...any) error {
	_ = c.c.SetWriteDeadline(time.Now().Add(c.to))
	_, err := fmt.Fprintf(c.c, format+"\n", a...)
	if err != nil {
		return fmt.Errorf("out-of-band exchange: %w", err)
	}
	return nil
}

func (c *conn) recv() (string, error) {
	_ = c.c.SetReadDeadline(time.Now().Add(c.to))
	line, err := c.r.ReadString('\n')
	if err != nil {
		if errors.Is(err, net.ErrClosed) || line == "" {
			return "", fmt.Errorf("out-of-band exchange: peer closed the connection: %w", err)
		}
		return "", fmt.Errorf("out-of-band exchange: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// expect reads a line that must start with word.
func (c *conn) expect(word string) ([]string, error) {
	line, err := c.recv()
	if err != nil {
		return nil, err
	}
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "ERR" {
		return nil, fmt.Errorf("peer: %s", strings.TrimPrefix(line, "ERR "))
	}
	if len(f) == 0 || f[0] != word {
		return nil, fmt.Errorf("out-of-band exchange: expected %s, got %q", word, line)
	}
	return f[1:], nil
}

// qpInfo is what each side tells the other about one queue pair.
type qpInfo struct {
	QPN, PSN uint32
	GID      netip.Addr
	RKey     uint32
	VA       uint64
}

func (c *conn) sendQP(q qpInfo) error {
	return c.send("QP %06x %06x %s %08x %016x", q.QPN, q.PSN, q.GID.String(), q.RKey, q.VA)
}

func (c *conn) recvQP() (qpInfo, error) {
	f, err := c.expect("QP")
	if err != nil {
		return qpInfo{}, err
	}
	if len(f) != 5 {
		return qpInfo{}, fmt.Errorf("out-of-band exchange: bad QP line %q", strings.Join(f, " "))
	}
	var q qpInfo
	var errs [5]error
	var v uint64
	v, errs[0] = strconv.ParseUint(f[0], 16, 24)
	q.QPN = uint32(v)
	v, errs[1] = strconv.ParseUint(f[1], 16, 24)
	q.PSN = uint32(v)
	q.GID, errs[2] = netip.ParseAddr(f[2])
	v, errs[3] = strconv.ParseUint(f[3], 16, 32)
	q.RKey = uint32(v)
	q.VA, errs[4] = strconv.ParseUint(f[4], 16, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return qpInfo{}, fmt.Errorf("out-of-band exchange: bad QP line: %w", err)
	}
	return q, nil
}

// params are the test parameters the client announces.
type params struct {
	Op    string
	Size  int
	QPs   int
	Iters int
	Lat   bool
	MTU   int
	CPU   bool // the client reads the server's CPU time on STATS
}

func (c *conn) sendParams(p params) error {
	lat := 0
	if p.Lat {
		lat = 1
	}
	// This client always reads the server's CPU time.
	return c.send("%s op=%s size=%d qps=%d iters=%d lat=%d mtu=%d cpu=1", protoVersion, p.Op, p.Size, p.QPs, p.Iters, lat, p.MTU)
}

func parseParams(line string) (params, error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != protoVersion {
		return params{}, fmt.Errorf("out-of-band exchange: expected %s, got %q", protoVersion, line)
	}
	var p params
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if k != "op" && err != nil {
			return params{}, fmt.Errorf("out-of-band exchange: bad parameter %q", kv)
		}
		switch k {
		case "op":
			p.Op = v
		case "size":
			p.Size = n
		case "qps":
			p.QPs = n
		case "iters":
			p.Iters = n
		case "lat":
			p.Lat = n != 0
		case "mtu":
			p.MTU = n
		case "cpu":
			p.CPU = n != 0
		}
	}
	return p, nil
}

// sendStats sends the server's end-of-test reply, format and a being its
// figures, with the server's CPU time over the test when the client
// asked for it.
func (c *conn) sendStats(cpu CPU, format string, a ...any) error {
	if c.cpu {
		return c.send(format+" %s", append(a, cpu.fields())...)
	}
	return c.send(format, a...)
}

// finish tells the server the client is done and returns its STATS.
func (c *conn) finish() ([]string, error) {
	if err := c.send("DONE"); err != nil {
		return nil, err
	}
	return c.expect("STATS")
}
