package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"

	"github.com/softfabric/softfabric/fabric"
)

// Ping is rping's client (-c): it connects from cfg.Source (or the
// device's address) to the server at cfg.Addr, port cfg.Port, pings
// cfg.Count times (0: until the server goes away) and disconnects. Its
// output goes to stdout and stderr, as rping's. A server that disconnects
// ends the run without an error, as it ends rping's.
func Ping(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return err
	}
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return errors.New("the client needs the server's address (-a)")
	}
	o := &out{stdout: stdout, stderr: stderr, debug: cfg.Debug}
	d, err := openDomain(ctx, cfg, cfg.Source)
	if err != nil {
		return err
	}
	defer d.Close()
	c, err := newConn(ctx, d, &d.Info, cfg.Size, false, o)
	if err != nil {
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer c.close()

	server := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	err = c.ep.Connect(cctx, server, nil) // rping sends no private data
	cancel()
	if err != nil {
		return connectError(ctx, cfg, server, err)
	}
	o.debugf("rdma_connect successful")
	c.state = stateConnected

	err = c.ping(cfg)
	if errors.Is(err, errDisconnected) {
		return nil
	}
	if err != nil {
		return err
	}
	// rping_disconnect: rping reports the DISCONNECTED event that answers
	// its own disconnect.
	if c.ep.Shutdown() == nil {
		o.debugf("cma_event type RDMA_CM_EVENT_DISCONNECTED (parent)")
		o.errorf("client DISCONNECT EVENT...")
	}
	return nil
}

// connectError says why the connection to server failed, with the
// rdma_cm event rping would have reported.
func connectError(ctx context.Context, cfg Config, server netip.AddrPort, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("connecting to %v: %w", server, ctx.Err())
	// RDMA-CM answers a request to a port nobody listens on with a
	// REJ; fabric's TCP seam, with a refused connection.
	case errors.Is(err, fabric.ErrRejected):
		return fmt.Errorf("cma event RDMA_CM_EVENT_REJECTED: no rping server at %v: %w", server, fabric.ErrRejected)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cma event RDMA_CM_EVENT_REJECTED: no rping server at %v: %w", server, syscall.ECONNREFUSED)
	// Address resolution failed: nobody has the address.
	case errors.Is(err, fabric.ErrAddrNotAvail):
		return fmt.Errorf("cma event RDMA_CM_EVENT_ADDR_ERROR: nobody answers for %v: %w", server, fabric.ErrAddrNotAvail)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cma event RDMA_CM_EVENT_UNREACHABLE: no answer from %v in %v: %w", server, cfg.ConnectTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("connecting to %v: %w", server, err)
}

// ping is rping_test_client: each ping offers the start buffer for the
// server to read, then the rdma buffer for it to write back into.
func (c *conn) ping(cfg Config) error {
	start, buf := c.start.Bytes(), c.rdma.Bytes()
	for n := 0; cfg.Count == 0 || n < cfg.Count; n++ {
		c.state = stateReadAdv
		fill(start, n)
		if err := c.offer(c.start); err != nil {
			return err
		}
		if err := c.expect(stateWriteAdv); err != nil { // the server read it
			return err
		}
		if err := c.offer(c.rdma); err != nil {
			return err
		}
		if err := c.expect(stateWriteComplete); err != nil { // and wrote it back
			return err
		}
		if cfg.Validate && !bytes.Equal(start, buf) {
			c.o.errorf("data mismatch!")
			return fmt.Errorf("ping %d: data mismatch", n)
		}
		if cfg.Verbose {
			c.o.printf("ping data: %s", cstring(buf))
		}
	}
	return nil
}

// offer sends the info of a whole buffer, as rping_format_send does.
func (c *conn) offer(m *fabric.MR) error {
	in := info{addr: m.Addr(), rkey: uint32(m.Key()), size: uint32(len(m.Bytes()))}
	c.o.debugf("RDMA addr %x rkey %x len %d", in.addr, in.rkey, in.size)
	return c.sendInfo(in)
}
