package fabric

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Counter counts completed operations (and failed ones apart), for
// applications that need how many, not which: bind it to an endpoint with
// the kinds of operation it counts (FlagSend, FlagRecv, FlagRead,
// FlagWrite, FlagRemoteRead, FlagRemoteWrite).
type Counter struct {
	d    *Domain
	v    atomic.Uint64
	errs atomic.Uint64
	refs refs
}

// Counter opens a counter at zero.
func (d *Domain) Counter() (*Counter, error) {
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	return &Counter{d: d}, nil
}

// Read returns the count of successful operations (driving the transport
// first, with manual progress).
func (c *Counter) Read() uint64 {
	c.d.Progress()
	return c.v.Load()
}

// ReadErr returns the count of failed operations.
func (c *Counter) ReadErr() uint64 {
	c.d.Progress()
	return c.errs.Load()
}

// Add adds n to the count.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Set sets the count.
func (c *Counter) Set(n uint64) { c.v.Store(n) }

// AddErr adds n to the error count.
func (c *Counter) AddErr(n uint64) { c.errs.Add(n) }

// SetErr sets the error count.
func (c *Counter) SetErr(n uint64) { c.errs.Store(n) }

// Wait returns when the count reaches threshold, or with ErrTimedOut-like
// ctx errors when ctx ends, or ErrRemoteOp-wrapped when the error count
// grows while waiting (libfabric's fi_cntr_wait fails then too).
func (c *Counter) Wait(ctx context.Context, threshold uint64) error {
	errs0 := c.errs.Load()
	for i := 0; ; i++ {
		if c.Read() >= threshold {
			return nil
		}
		if e := c.errs.Load(); e != errs0 {
			return fmt.Errorf("counter: %d operations failed while waiting: %w", e-errs0, ErrRemoteOp)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case i < spinReads:
		case i < 4*spinReads:
			runtime.Gosched()
		default:
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// Close closes the counter; ErrBusy while endpoints are bound to it.
func (c *Counter) Close() error {
	first, err := c.refs.closing()
	if first {
		c.d.refs.done()
	}
	return err
}

// count records a completion of an operation: ok or failed.
func (c *Counter) count(ok bool) {
	if c == nil {
		return
	}
	if ok {
		c.v.Add(1)
	} else {
		c.errs.Add(1)
	}
}
