// Package rping speaks librdmacm's rping (rdma-core,
// librdmacm/examples/rping.c) over package fabric: its server and client,
// their exchange on the wire, their options and their output.
//
// Each ping, on one RC connection:
//
//	client                                server
//	SEND info{start buf, rkey, size} ──▶
//	                                 ◀── RDMA READ of the start buffer
//	                                 ◀── SEND go-ahead (16 zero bytes)
//	SEND info{rdma buf, rkey, size}  ──▶
//	                                 ◀── RDMA WRITE of what it read
//	                                 ◀── SEND go-ahead
//	compare start and rdma buffers (-V)
//
// The server serves until its client disconnects (all clients, for ever,
// when persistent); the client disconnects after Count pings (0: never).
// Infos are rping_rdma_info: a big-endian 64-bit virtual address, 32-bit
// rkey and 32-bit size. Addresses are the peer's own: fabric's memory
// regions use virtual addressing, as rxe does.
package rping

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// rping's defaults and limits.
const (
	// DefaultPort is rping's port (rping.c: cb->port = htobe16(7174);
	// not RDMA-CM's 7471 of rdma_server and ucmatose).
	DefaultPort = 7174
	// DefaultSize is rping's -S default (cb->size = 64; its man page
	// says 100, the code has said 64 since 2005).
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE as rping computes it:
	// sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: "), where
	// INT_MAX is not defined in rping.c and so stringifies as itself:
	// 8 + 15 ("Invalid size 20 (valid range is 23 to 65536)").
	MinSize = 23
	// MaxSize is the largest -S rping takes (RPING_BUFSIZE - 1; its
	// message says 65536).
	MaxSize = 64*1024 - 1
	// DefaultConnectTimeout bounds the client's connection setup.
	DefaultConnectTimeout = 10 * time.Second

	infoSize = 16 // sizeof(struct rping_rdma_info)
	sqDepth  = 16 // RPING_SQ_DEPTH
	rqDepth  = 2  // max_recv_wr
)

// Config is one rping run: rping's options and where it runs.
type Config struct {
	// Provider is the fabric provider: fabric.ProviderSoftfabric when
	// empty, or fabric.ProviderMem (in-process; Addr or Source names
	// the device).
	Provider string
	// Iface is the softfabric device; empty: the device that has the
	// local address (Addr for a server, Source for a client), or the
	// only one up.
	Iface string
	// Addr is -a: the server's address to bind to (invalid or
	// unspecified: the device's), the client's server address.
	Addr netip.Addr
	// Source is -I: the client's source address (invalid: the
	// device's).
	Source netip.Addr
	// Port is -p (0: DefaultPort).
	Port uint16
	// Size is -S, the ping data size (0: DefaultSize).
	Size int
	// Count is -C, the client's pings (0: for ever). rping's server
	// takes -C and ignores it, and so does this one.
	Count int
	// Verbose (-v) prints the ping data, Validate (-V) compares it
	// (client), Debug (-d) prints rping's debug lines.
	Verbose, Validate, Debug bool
	// Persistent (-P): the server serves every client, concurrently,
	// until its context ends.
	Persistent bool
	// ConnectTimeout bounds the client's connection setup (0:
	// DefaultConnectTimeout).
	ConnectTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Provider == "" {
		c.Provider = fabric.ProviderSoftfabric
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	return c
}

// check refuses what rping refuses.
func (c Config) check() error {
	if c.Size < MinSize || c.Size > MaxSize {
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", c.Size, MinSize, MaxSize)
	}
	if c.Count < 0 {
		return fmt.Errorf("invalid count %d", c.Count)
	}
	return nil
}

// info is struct rping_rdma_info.
type info struct {
	addr uint64
	rkey uint32
	size uint32
}

func (in info) put(b []byte) {
	binary.BigEndian.PutUint64(b[0:], in.addr)
	binary.BigEndian.PutUint32(b[8:], in.rkey)
	binary.BigEndian.PutUint32(b[12:], in.size)
}

func parseInfo(b []byte) info {
	return info{addr: binary.BigEndian.Uint64(b[0:]), rkey: binary.BigEndian.Uint32(b[8:]),
		size: binary.BigEndian.Uint32(b[12:])}
}

// fill writes ping number n's data into b as rping's client does:
// "rdma-ping-N: ", then printable characters from 'A' + n%58 upwards,
// 'z' wrapping to 'A', and a NUL in the last byte.
func fill(b []byte, n int) {
	i := copy(b, fmt.Sprintf("rdma-ping-%d: ", n))
	c := byte('A' + n%58)
	for ; i < len(b); i++ {
		b[i] = c
		if c++; c > 'z' {
			c = 'A'
		}
	}
	b[len(b)-1] = 0
}

// cstring is b up to its first NUL, as rping prints its buffers with %s.
func cstring(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// out is rping's stdout and stderr. Lines are written whole, under a
// lock: a persistent server's connections share them.
type out struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	debug          bool
}

func (o *out) printf(format string, a ...any) { o.write(o.stdout, format, a...) }
func (o *out) errorf(format string, a ...any) { o.write(o.stderr, format, a...) }

// debugf prints one of rping's DEBUG_LOG lines (stdout, -d).
func (o *out) debugf(format string, a ...any) {
	if o.debug {
		o.write(o.stdout, format, a...)
	}
}

func (o *out) write(w io.Writer, format string, a ...any) {
	line := fmt.Sprintf(format+"\n", a...)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = io.WriteString(w, line)
}
