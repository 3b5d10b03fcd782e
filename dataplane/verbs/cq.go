package verbs

import (
	"errors"
	"sync/atomic"
)

// ErrQueueFull is returned when a work request is posted to a full queue.
var ErrQueueFull = errors.New("queue full")

// CQ is a completion queue: a single-producer, single-consumer ring. The
// producer is the goroutine that owns the queue pairs feeding the CQ (the
// engine worker); the consumer is whoever polls. Several queue pairs may
// share a CQ as long as one goroutine owns them all.
type CQ struct {
	ring []Completion
	mask uint64
	_    [64]byte
	head atomic.Uint64 // next entry to poll; written by the consumer
	_    [56]byte
	tail atomic.Uint64 // next entry to fill; written by the producer
	_    [56]byte
	// Overflows counts completions lost to a full queue: an application
	// error (the CQ was sized too small), reported as in verbs by the
	// async event that a later control plane raises.
	overflows atomic.Uint64
}

// NewCQ returns a completion queue holding at least depth entries.
func NewCQ(depth int) *CQ {
	n := 1
	for n < depth {
		n <<= 1
	}
	return &CQ{ring: make([]Completion, n), mask: uint64(n - 1)}
}

// Cap is the number of entries the queue holds.
func (c *CQ) Cap() int { return len(c.ring) }

// Len is the number of completions waiting to be polled.
func (c *CQ) Len() int { return int(c.tail.Load() - c.head.Load()) }

// Push adds a completion. It reports false, and counts an overflow, when the
// queue is full.
func (c *CQ) Push(e *Completion) bool {
	t := c.tail.Load()
	if t-c.head.Load() >= uint64(len(c.ring)) {
		c.overflows.Add(1)
		return false
	}
	c.ring[t&c.mask] = *e
	c.tail.Store(t + 1)
	return true
}

// Poll moves up to len(out) completions into out and returns how many.
func (c *CQ) Poll(out []Completion) int {
	h := c.head.Load()
	n := int(c.tail.Load() - h)
	if n > len(out) {
		n = len(out)
	}
	for i := 0; i < n; i++ {
		out[i] = c.ring[(h+uint64(i))&c.mask]
	}
	c.head.Store(h + uint64(n))
	return n
}

// Overflows is the number of completions lost because the queue was full.
func (c *CQ) Overflows() uint64 { return c.overflows.Load() }
