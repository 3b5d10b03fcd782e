// Package ucmatose speaks librdmacm's connection examples over package
// fabric: ucmatose (rdma-core, librdmacm/examples/cmatose.c), udaddy
// (udaddy.c, UD queue pairs resolved by SIDR; udaddy.go) and rdma_server
// / rdma_client (rdma_server.c, rdma_client.c): their exchanges on the
// wire, their options and their output.
//
// ucmatose, on each of Connections RC connections made over RDMA-CM
// (port 7471 of the TCP port space, no private data):
//
//	client                                   server
//	post Count receives of Size bytes        post Count receives of Size bytes
//	REQ (retry_count 5, resources 1/1) ──▶   (each request accepted in turn)
//	                                    ◀──  REP; RTU ──▶
//	      (all Connections established on both sides)
//	                                    ◀──  Count SENDs of Size bytes
//	wait for Count receives
//	Count SENDs of Size bytes           ──▶
//	                                         wait for its sends, then for Count receives
//	                                    ◀──  DREQ (the server disconnects)
//	DREP                                ──▶
//
// Size 0 makes Count 0: the connections are made and closed, nothing is
// sent. The data is whatever the buffer holds (cmatose sends malloc'd
// memory unwritten); nobody checks it.
//
// rdma_server and rdma_client: one connection on port 7471, one 16-byte
// receive posted by each side before it connects or accepts; the client
// sends 16 bytes first, the server answers with 16, and each side
// disconnects once its part is done (the client after its receive, the
// server after its send completed).
package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/softfabric/softfabric/fabric"
	"github.com/softfabric/softfabric/internal/msgdomain"
)

// ucmatose's defaults and softfabric's limits.
const (
	// DefaultPort is cmatose.c's port ("7471"), rdma_server's and
	// rdma_client's too.
	DefaultPort = 7471
	// DefaultConnections is -c's default (connections = 1).
	DefaultConnections = 1
	// DefaultCount is -C's default (message_count = 10).
	DefaultCount = 10
	// DefaultSize is -S's default (message_size = 100).
	DefaultSize = 100
	// MaxCount is the most messages per connection: cmatose posts them
	// all at once, and a softfabric queue holds at most 4096.
	MaxCount = 4096
	// MaxSize is the largest message softfabric's RC sends carry here.
	MaxSize = 1 << 30
	// DefaultConnectTimeout bounds the client's connection setup and
	// the server's accept of each request.
	DefaultConnectTimeout = 10 * time.Second
	// clientRetryCount is cmatose's conn_param.retry_count.
	clientRetryCount = 5
)

// Config is one ucmatose run: its options and where it runs.
type Config struct {
	// Provider is the fabric provider: fabric.ProviderSoftfabric when
	// empty, or fabric.ProviderMem (in-process; Server or Bind names the
	// device).
	Provider string
	// Iface is the softfabric device; empty: the device that has the
	// local address (Bind), or the only one up.
	Iface string
	// Server is -s: the server's address; invalid for the server.
	Server netip.Addr
	// Bind is -b: the local address (invalid or unspecified: the
	// device's).
	Bind netip.Addr
	// Port is -p (0: DefaultPort).
	Port uint16
	// Connections is -c (0: DefaultConnections).
	Connections int
	// Count is -C, the messages each way on each connection; Size is -S,
	// their size: 0 is a valid -C and -S (Size 0 makes Count 0), so
	// start from Defaults() for cmatose's 10 and 100.
	Count, Size int
	// AckTimeout is -a (0: fabric's default), the RC ACK timeout as
	// IBTA encodes it.
	AckTimeout int
	// Migrate is -m: cmatose migrates its ids to a new event channel
	// before the disconnects, which changes nothing on the wire; the
	// run says so, as cmatose does.
	Migrate bool
	// ConnectTimeout bounds the client's connection setup and the
	// server's accept (0: DefaultConnectTimeout).
	ConnectTimeout time.Duration
}

// Defaults returns the configuration of a ucmatose run without options.
func Defaults() Config {
	return Config{Port: DefaultPort, Connections: DefaultConnections, Count: DefaultCount, Size: DefaultSize}
}

func (c Config) withDefaults() Config {
	if c.Provider == "" {
		c.Provider = fabric.ProviderSoftfabric
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	// create_message: no size, no messages.
	if c.Size == 0 {
		c.Count = 0
	}
	return c
}

// check refuses what softfabric cannot do.
func (c Config) check() error {
	switch {
	case c.Connections < 1:
		return fmt.Errorf("invalid connection count %d", c.Connections)
	case c.Count < 0 || c.Count > MaxCount:
		return fmt.Errorf("invalid message count %d (0 to %d)", c.Count, MaxCount)
	case c.Size < 0 || c.Size > MaxSize:
		return fmt.Errorf("invalid message size %d (0 to %d)", c.Size, MaxSize)
	case c.AckTimeout < 0 || c.AckTimeout > 31:
		return fmt.Errorf("invalid ack timeout %d (1 to 31)", c.AckTimeout)
	}
	return nil
}

// domain is a run's fabric and domain on its device.
type domain = msgdomain.Domain

// openDomain opens the device whose address is local (invalid or
// unspecified: the device's own) for MSG endpoints whose queues hold
// depth operations each way.
func openDomain(ctx context.Context, provider, iface string, port uint16, local netip.Addr, depth int) (*domain, error) {
	return msgdomain.Open(ctx, msgdomain.Options{Provider: provider, Iface: iface, Port: port, Local: local, TX: depth, RX: depth})
}

// CMError is a connection that failed as an rdma_cm event reports it:
// the event's name and status, as cmatose prints them ("cmatose: event:
// RDMA_CM_EVENT_REJECTED, error: 8").
type CMError struct {
	Event  string
	Status int
	Err    error
}

func (e *CMError) Error() string {
	return fmt.Sprintf("%s, error: %d: %v", e.Event, e.Status, e.Err)
}

func (e *CMError) Unwrap() error { return e.Err }

// cmError says why a connection to server failed, as the rdma_cm event
// a librdmacm client would have seen: REJECTED with the REJ's reason (8,
// invalid service ID, when nobody listens), UNREACHABLE or ADDR_ERROR
// with -ETIMEDOUT.
func cmError(ctx context.Context, server netip.AddrPort, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("connecting to %v: %w", server, ctx.Err())
	case errors.Is(err, fabric.ErrRejected), errors.Is(err, syscall.ECONNREFUSED):
		return &CMError{"RDMA_CM_EVENT_REJECTED", 8, fmt.Errorf("nobody listens at %v: %w", server, err)}
	case errors.Is(err, fabric.ErrAddrNotAvail):
		return &CMError{"RDMA_CM_EVENT_ADDR_ERROR", -int(syscall.ETIMEDOUT), fmt.Errorf("nobody answers for %v: %w", server.Addr(), err)}
	case errors.Is(err, context.DeadlineExceeded):
		return &CMError{"RDMA_CM_EVENT_UNREACHABLE", -int(syscall.ETIMEDOUT), fmt.Errorf("no answer from %v in %v: %w", server, timeout, err)}
	}
	return &CMError{"RDMA_CM_EVENT_CONNECT_ERROR", -int(syscall.ECONNRESET), fmt.Errorf("connecting to %v: %w", server, err)}
}

// status is the "return status" cmatose prints for err.
func status(err error) int {
	var ce *CMError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.Status
	}
	return -1
}

// out is the tools' stdout and stderr, written a whole line at a time.
type out struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

func (o *out) printf(format string, a ...any) { o.write(o.stdout, format, a...) }

func (o *out) write(w io.Writer, format string, a ...any) {
	line := fmt.Sprintf(format+"\n", a...)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = io.WriteString(w, line)
}
