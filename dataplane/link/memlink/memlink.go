// Package memlink is an in-memory link.Link pair for tests and benchmarks,
// with loss, duplication, reordering, corruption and delay injected per
// direction from a seeded random source.
//
// Each direction is a bounded queue of frame copies ordered by delivery time
// and then by the order they were queued. A frame given to Send goes through
// these steps, each drawn from the direction's own random source:
//
//  1. Sent is counted.
//  2. With probability Loss it is dropped (Lost).
//  3. With probability Duplicate a second copy is made (Duplicated). Each
//     copy then goes through the next steps on its own, so the duplicate may
//     be corrupted differently or come later.
//  4. With probability Corrupt one random bit of the copy is flipped
//     (Corrupted); a receiver's ICRC must catch it.
//  5. It is due Delay after Send. With probability Reorder it is held back
//     (Reordered): by a uniform extra delay in (0, ReorderDelay], or, with
//     ReorderDelay 0, until the next frame queued in that direction, behind
//     which it is then delivered (a swap of neighbours). At most one frame
//     is held that way at a time: a frame queued while one is held passes
//     it rather than being held too, so the fraction of frames reordered is
//     Reorder/(1+Reorder). A held frame waits as long as the next frame
//     takes to come; a transport's retransmission releases it.
//  6. If the direction already holds Capacity frames, the copy is dropped
//     (Overflow), as a switch's full buffer does. With Config.Backpressure,
//     Send instead stops at a full queue and reports how many it took. The
//     one frame held for a swap does not count against Capacity, so a
//     Capacity of 1 cannot wedge behind it.
//
// Recv hands out, in order, the frames whose time has come (Delivered).
// Frames longer than MaxFrame are refused by Send with an error wrapping
// link.ErrFrameTooLarge: a transport that builds one has a bug, and an
// error finds it sooner than a counter.
//
// For a given Seed, Config and sequence of Send calls in a direction, the
// faults fall on the same frames every run: each direction has its own
// random source, so the other direction's traffic does not disturb it.
// Delay and ReorderDelay are measured on Config.Now; tests drive a virtual
// clock with it.
//
// An Endpoint is safe for one goroutine sending and another receiving at the
// same time, and for both endpoints being driven from one goroutine. Each
// Send or Recv call takes its direction's mutex once. Frame buffers come
// from a per-direction free list that grows lazily up to Capacity (plus
// two), so a warm link allocates nothing.
package memlink

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
)

// Defaults for a zero Config.
const (
	// DefaultMaxFrame is a 9000-byte jumbo MTU plus Ethernet header and
	// FCS: a 4096-byte RoCE MTU with every header and the ICRC fits.
	DefaultMaxFrame = 9018
	// DefaultCapacity is the number of frames queued per direction.
	DefaultCapacity = 4096
)

// Faults are the impairments applied to the frames of one direction
// (link.Faults). The zero value is a perfect link. With ReorderDelay 0 a
// frame chosen for reordering is swapped behind the next frame queued.
type Faults = link.Faults

// Config sets up a pair. The zero value is a perfect link with default
// sizes, seed 0 and the monotonic clock.
type Config struct {
	// MaxFrame is the largest frame carried; 0 means DefaultMaxFrame.
	MaxFrame int
	// Capacity is the number of frames queued per direction; 0 means
	// DefaultCapacity. Beyond it frames are dropped and counted as
	// Overflow, unless Backpressure is set.
	Capacity int
	// Backpressure makes Send stop at a full queue and return the number
	// of frames taken, as a full transmit ring does, instead of dropping.
	// A duplicate copy made by fault injection can still overflow.
	Backpressure bool
	// AtoB applies to frames sent by a, BtoA to frames sent by b.
	AtoB, BtoA Faults
	// AtoBRate and BtoARate are each direction's line rate in bytes per
	// second (0: unlimited): a frame is due only once the frames before it
	// have been serialised, then Delay later, so a long burst spreads out
	// in time as it does behind a slow NIC or peer.
	AtoBRate, BtoARate float64
	// Seed fixes the fault pattern (math/rand/v2 PCG).
	Seed uint64
	// Now is the clock for Delay and ReorderDelay; nil means monotonic
	// time since NewPair. It is called with a direction's mutex held, and
	// from both the sending and the receiving goroutine.
	Now func() time.Duration
}

// Stats counts what happened to the frames sent in one direction. Every
// frame copy ends up Delivered, Lost, Overflow or still queued:
// Sent + Duplicated = Delivered + Lost + Overflow + Pending.
type Stats struct {
	Sent       uint64 // frames taken by Send
	Delivered  uint64 // frame copies handed out by Recv
	Lost       uint64 // frames dropped by Loss
	Duplicated uint64 // extra copies made by Duplicate
	Reordered  uint64 // copies held back by Reorder
	Corrupted  uint64 // copies with a bit flipped by Corrupt
	Overflow   uint64 // copies dropped at a full queue
}

// Endpoint is one end of a pair. It implements link.Link.
type Endpoint struct {
	tx, rx   *pipe
	maxFrame int
}

var _ link.Link = (*Endpoint)(nil)

// NewPair returns two connected endpoints: what a sends, b receives, and the
// other way round. It panics on an invalid Config (a probability outside
// [0, 1], a negative size or delay).
func NewPair(cfg Config) (a, b *Endpoint) {
	if cfg.MaxFrame < 0 || cfg.Capacity < 0 {
		panic(fmt.Sprintf("memlink: negative MaxFrame %d or Capacity %d", cfg.MaxFrame, cfg.Capacity))
	}
	if cfg.Capacity > math.MaxInt32 {
		panic(fmt.Sprintf("memlink: Capacity %d too large", cfg.Capacity))
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	for _, f := range [...]Faults{cfg.AtoB, cfg.BtoA} {
		if err := f.Validate(); err != nil {
			panic(err.Error())
		}
	}
	if !(cfg.AtoBRate >= 0 && cfg.BtoARate >= 0) {
		panic(fmt.Sprintf("memlink: line rates %v, %v: want 0 (unlimited) or positive", cfg.AtoBRate, cfg.BtoARate))
	}
	now := cfg.Now
	if now == nil {
		start := time.Now()
		now = func() time.Duration { return time.Since(start) }
	}
	// Distinct PCG streams per direction keep each direction's pattern
	// independent of the other's traffic.
	ab := newPipe(cfg, cfg.AtoB, now, rand.NewPCG(cfg.Seed, 0x736f6674_61746f62))
	ba := newPipe(cfg, cfg.BtoA, now, rand.NewPCG(cfg.Seed, 0x736f6674_62746f61))
	ab.rate, ba.rate = cfg.AtoBRate, cfg.BtoARate
	return &Endpoint{tx: ab, rx: ba, maxFrame: cfg.MaxFrame},
		&Endpoint{tx: ba, rx: ab, maxFrame: cfg.MaxFrame}
}

// MaxFrame is the largest frame the link carries.
func (e *Endpoint) MaxFrame() int { return e.maxFrame }

// Send queues a copy of each frame for the other endpoint, applying this
// direction's faults. It takes every frame and returns len(frames), nil,
// except at a full queue with Config.Backpressure (fewer taken, nil error)
// and for a frame over MaxFrame (the frames before it taken, and an error
// wrapping link.ErrFrameTooLarge).
func (e *Endpoint) Send(frames [][]byte) (int, error) {
	p := e.tx
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for i, f := range frames {
		if len(f) > p.maxFrame {
			return i, fmt.Errorf("memlink: frame of %d bytes over MaxFrame %d: %w", len(f), p.maxFrame, link.ErrFrameTooLarge)
		}
		if p.backpressure && len(p.heap) >= p.capacity {
			return i, nil
		}
		p.stats.Sent++
		if p.draw(p.faults.Loss) {
			p.stats.Lost++
			continue
		}
		copies := 1
		if p.draw(p.faults.Duplicate) {
			p.stats.Duplicated++
			copies = 2
		}
		for range copies {
			p.enqueue(f, now)
		}
	}
	return len(frames), nil
}

// Recv copies frames that are due into bufs, in delivery order. A frame
// that does not fit its buffer stays queued, and Recv returns the frames
// before it with an error wrapping link.ErrFrameTooLarge.
func (e *Endpoint) Recv(bufs [][]byte, sizes []int) (int, error) {
	p := e.rx
	n := min(len(bufs), len(sizes))
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.heap) == 0 || n == 0 {
		return 0, nil
	}
	now := p.now()
	i := 0
	for i < n && len(p.heap) > 0 {
		idx := p.heap[0]
		s := &p.slots[idx]
		if s.at > now {
			break
		}
		b := bufs[i][:cap(bufs[i])]
		if len(s.buf) > len(b) {
			return i, fmt.Errorf("memlink: frame of %d bytes does not fit a %d-byte buffer: %w", len(s.buf), len(b), link.ErrFrameTooLarge)
		}
		sizes[i] = copy(b, s.buf)
		p.pop()
		p.free = append(p.free, idx)
		p.stats.Delivered++
		i++
	}
	return i, nil
}

// SetFaults replaces the faults applied to frames this endpoint sends, from
// the next Send on; frames already queued keep their fate. It panics on
// invalid Faults.
func (e *Endpoint) SetFaults(f Faults) {
	if err := f.Validate(); err != nil {
		panic(err.Error())
	}
	e.tx.mu.Lock()
	e.tx.faults = f
	e.tx.mu.Unlock()
}

// Stats returns the counters for the direction this endpoint sends in.
func (e *Endpoint) Stats() Stats {
	e.tx.mu.Lock()
	defer e.tx.mu.Unlock()
	return e.tx.stats
}

// Pending returns how many frame copies are queued in the direction this
// endpoint sends in, due or not, held back for reordering included.
func (e *Endpoint) Pending() int {
	e.tx.mu.Lock()
	defer e.tx.mu.Unlock()
	return e.tx.pending()
}

// slot holds one queued frame copy.
type slot struct {
	buf []byte        // the frame; its capacity is kept for reuse
	at  time.Duration // when it is due
	seq uint64        // queue order, to break ties in at
}

// pipe is one direction of a pair.
type pipe struct {
	mu           sync.Mutex
	faults       Faults
	rng          *rand.Rand
	now          func() time.Duration
	maxFrame     int
	capacity     int
	backpressure bool
	rate         float64       // bytes per second, 0: unlimited
	lineFree     time.Duration // when the line has serialised what it was given

	slots []slot  // every buffer ever used; grows lazily to about capacity
	free  []int32 // slots not in use
	heap  []int32 // queued slots, a min-heap on (at, seq)
	held  int32   // slot swapped behind the next frame, or -1
	seq   uint64
	stats Stats
}

func newPipe(cfg Config, f Faults, now func() time.Duration, src rand.Source) *pipe {
	return &pipe{
		faults:       f,
		rng:          rand.New(src),
		now:          now,
		maxFrame:     cfg.MaxFrame,
		capacity:     cfg.Capacity,
		backpressure: cfg.Backpressure,
		held:         -1,
	}
}

func (p *pipe) pending() int { return len(p.slots) - len(p.free) }

// draw reports true with probability prob, consuming no randomness for a
// fault that is off.
func (p *pipe) draw(prob float64) bool {
	return prob > 0 && p.rng.Float64() < prob
}

// enqueue queues one copy of f, due Delay after now, applying Corrupt and
// Reorder.
func (p *pipe) enqueue(f []byte, now time.Duration) {
	if len(p.heap) >= p.capacity {
		p.stats.Overflow++
		return
	}
	idx := p.alloc()
	s := &p.slots[idx]
	if cap(s.buf) < len(f) {
		s.buf = make([]byte, len(f), bufCap(len(f), p.maxFrame))
	}
	s.buf = s.buf[:len(f)]
	copy(s.buf, f)
	if len(f) > 0 && p.draw(p.faults.Corrupt) {
		bit := p.rng.IntN(len(f) * 8)
		s.buf[bit>>3] ^= 1 << (bit & 7)
		p.stats.Corrupted++
	}
	s.at = now + p.faults.Delay
	if p.rate > 0 {
		p.lineFree = max(p.lineFree, now) + time.Duration(float64(len(f))*1e9/p.rate)
		s.at = p.lineFree + p.faults.Delay
	}
	s.seq = p.seq
	p.seq++
	if p.faults.ReorderDelay > 0 {
		if p.draw(p.faults.Reorder) {
			s.at += 1 + time.Duration(p.rng.Int64N(int64(p.faults.ReorderDelay)))
			p.stats.Reordered++
		}
		p.push(idx)
		p.release(s.at)
		return
	}
	if p.held < 0 && p.draw(p.faults.Reorder) {
		p.held = idx
		p.stats.Reordered++
		return
	}
	p.push(idx)
	p.release(s.at)
}

// release queues the frame held for reordering, if any, behind a frame just
// queued with due time at.
func (p *pipe) release(at time.Duration) {
	if p.held < 0 {
		return
	}
	h := &p.slots[p.held]
	h.at = max(h.at, at)
	h.seq = p.seq
	p.seq++
	p.push(p.held)
	p.held = -1
}

// bufCap sizes a new frame buffer: a power of two from 256 so that frames of
// varying length settle on a few reallocations, never beyond maxFrame.
func bufCap(n, maxFrame int) int {
	c := 256
	for c < n {
		c <<= 1
	}
	return max(min(c, maxFrame), n)
}

// alloc returns a free slot. At most capacity+2 are ever in use: capacity
// queued, one held for a swap, and one being queued that releases it.
func (p *pipe) alloc() int32 {
	if n := len(p.free); n > 0 {
		idx := p.free[n-1]
		p.free = p.free[:n-1]
		return idx
	}
	p.slots = append(p.slots, slot{})
	return int32(len(p.slots) - 1)
}

func (p *pipe) less(i, j int32) bool {
	a, b := &p.slots[i], &p.slots[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (p *pipe) push(idx int32) {
	p.heap = append(p.heap, idx)
	h := p.heap
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !p.less(h[i], h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (p *pipe) pop() {
	h := p.heap
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	p.heap = h
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && p.less(h[r], h[l]) {
			m = r
		}
		if !p.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
