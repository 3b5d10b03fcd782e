package faulty

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
)

// DefaultCapacity is the number of frames held at most for a zero
// Config.Capacity.
const DefaultCapacity = 4096

// Faults are the impairments applied to transmitted frames (link.Faults).
type Faults = link.Faults

// Config sets up a Link. The zero value passes frames through with seed 0
// and the monotonic clock.
type Config struct {
	Faults Faults
	// Seed fixes the fault pattern (math/rand/v2 PCG).
	Seed uint64
	// Now is the clock for Delay and ReorderDelay; nil means monotonic
	// time since Wrap.
	Now func() time.Duration
	// Capacity is the number of frames held at most; 0 means
	// DefaultCapacity. Beyond it frames go out undelayed (Overflow).
	Capacity int
}

// Stats count what happened to the frames given to Send. Every frame copy
// is Delivered, Lost or Held: Sent + Duplicated = Delivered + Lost + Held.
type Stats struct {
	Sent       uint64 // frames taken by Send
	Delivered  uint64 // frame copies taken by the wrapped link
	Lost       uint64 // frames dropped by Loss
	Duplicated uint64 // extra copies made by Duplicate
	Reordered  uint64 // copies held back by Reorder
	Delayed    uint64 // copies held by Delay alone
	Corrupted  uint64 // copies with a bit flipped by Corrupt
	Overflow   uint64 // copies sent undelayed because Capacity were held
	Held       uint64 // copies held now
}

// Link applies Faults to the frames sent over a wrapped link. It implements
// link.Link.
type Link struct {
	inner    link.Link
	faults   Faults
	pcg      *rand.PCG
	rng      *rand.Rand
	now      func() time.Duration
	capacity int
	maxFrame int

	slots []slot  // every buffer ever used
	free  []int32 // slots not in use
	heap  []int32 // held slots, a min-heap on (at, seq)
	held  int32   // slot held for a swap behind the next frame, or -1
	seq   uint64
	stats Stats

	// Scratch of one Send call.
	out     [][]byte // copies for the wrapped link, in order
	outSlot []int32  // the slot behind each of out, or -1 for the caller's
	stage   []int32  // slots to hold once the wrapped link has answered
	marks   []mark   // the state before each frame, and after the last
}

var _ link.Link = (*Link)(nil)

// slot holds one frame copy.
type slot struct {
	buf []byte        // the frame; its capacity is kept for reuse
	at  time.Duration // when it is due
	seq uint64        // order of sending, to break ties in at
}

// mark is what Send must restore to undo the frames after it when the
// wrapped link refuses one of them.
type mark struct {
	pcg     rand.PCG
	stats   Stats
	out     int
	stage   int
	held    int32
	heldAt  time.Duration
	heldSeq uint64
}

// Wrap returns a Link that applies cfg.Faults to the frames sent over l.
func Wrap(l link.Link, cfg Config) (*Link, error) {
	if l == nil {
		return nil, errors.New("faulty: nil link")
	}
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.Capacity < 0 || cfg.Capacity > 1<<30 {
		return nil, fmt.Errorf("faulty: Capacity %d outside [0, 2^30]", cfg.Capacity)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	now := cfg.Now
	if now == nil {
		start := time.Now()
		now = func() time.Duration { return time.Since(start) }
	}
	pcg := rand.NewPCG(cfg.Seed, 0x736f6674_66617574)
	return &Link{
		inner:    l,
		faults:   cfg.Faults,
		pcg:      pcg,
		rng:      rand.New(pcg),
		now:      now,
		capacity: cfg.Capacity,
		maxFrame: l.MaxFrame(),
		held:     -1,
	}, nil
}

// MaxFrame is the wrapped link's.
func (l *Link) MaxFrame() int { return l.maxFrame }

// Stats returns the counters.
func (l *Link) Stats() Stats {
	s := l.stats
	s.Held = uint64(len(l.heap))
	if l.held >= 0 {
		s.Held++
	}
	return s
}

// Send first gives the wrapped link the held frames that are due, then
// applies the faults to frames and sends at once the copies due now. It
// returns len(frames), nil unless the wrapped link refuses frames: then
// the number of frames taken, and that link's error if it gave one. A
// frame over MaxFrame is refused with an error wrapping
// link.ErrFrameTooLarge, after the frames before it.
func (l *Link) Send(frames [][]byte) (int, error) {
	now := l.now()
	if done, err := l.release(now, false); !done || err != nil {
		return 0, err
	}
	n := len(frames)
	var tooLarge error
	for i, f := range frames {
		if len(f) > l.maxFrame {
			n = i
			tooLarge = fmt.Errorf("faulty: frame of %d bytes over MaxFrame %d: %w", len(f), l.maxFrame, link.ErrFrameTooLarge)
			break
		}
	}
	taken, err := l.send(frames[:n], now)
	if err == nil && taken == n {
		err = tooLarge
	}
	return taken, err
}

// Recv gives the wrapped link the held frames that are due, so that an
// engine polling for frames also drains them, then receives from it.
func (l *Link) Recv(bufs [][]byte, sizes []int) (int, error) {
	if _, err := l.release(l.now(), true); err != nil {
		return 0, err
	}
	return l.inner.Recv(bufs, sizes)
}

// Flush gives the wrapped link every held frame that is due. Frames it
// refuses stay held.
func (l *Link) Flush() error {
	_, err := l.release(l.now(), true)
	return err
}

// Wait blocks in the wrapped link's Wait, when it has one (an AF_XDP
// socket does), but no later than the next held frame is due, so that an
// idle engine wakes to release it. Without one it sleeps at most 1 ms.
func (l *Link) Wait(timeout time.Duration) error {
	if at, ok := l.nextDue(); ok {
		until := at - l.now()
		if until <= 0 {
			return nil
		}
		timeout = min(timeout, until)
	}
	if w, ok := l.inner.(interface{ Wait(time.Duration) error }); ok {
		return w.Wait(timeout)
	}
	time.Sleep(min(timeout, time.Millisecond))
	return nil
}

func (l *Link) nextDue() (time.Duration, bool) {
	switch {
	case len(l.heap) > 0 && l.held >= 0:
		return min(l.slots[l.heap[0]].at, l.slots[l.held].at), true
	case len(l.heap) > 0:
		return l.slots[l.heap[0]].at, true
	case l.held >= 0:
		return l.slots[l.held].at, true
	}
	return 0, false
}

// release sends the held frames due at now, in order, the one held for a
// swap too if swapped. Frames the wrapped link refuses go back to the
// heap, keeping their place. It reports whether all went.
func (l *Link) release(now time.Duration, swapped bool) (bool, error) {
	l.out, l.outSlot = l.out[:0], l.outSlot[:0]
	for {
		h := int32(-1)
		if len(l.heap) > 0 && l.slots[l.heap[0]].at <= now {
			h = l.heap[0]
		}
		if swapped && l.held >= 0 && l.slots[l.held].at <= now && (h < 0 || l.less(l.held, h)) {
			h = l.held
			l.held = -1
		} else if h >= 0 {
			l.pop()
		} else {
			break
		}
		l.out = append(l.out, l.slots[h].buf)
		l.outSlot = append(l.outSlot, h)
	}
	if len(l.out) == 0 {
		return true, nil
	}
	n, err := l.inner.Send(l.out)
	n = max(0, min(n, len(l.out)))
	l.stats.Delivered += uint64(n)
	for i, s := range l.outSlot {
		if i < n {
			l.freeSlot(s)
		} else {
			l.push(s)
		}
	}
	return n == len(l.out), err
}

// send applies the faults to frames, none over MaxFrame, and sends the
// copies due now in one call to the wrapped link.
func (l *Link) send(frames [][]byte, now time.Duration) (int, error) {
	l.out, l.outSlot, l.stage, l.marks = l.out[:0], l.outSlot[:0], l.stage[:0], l.marks[:0]
	for _, f := range frames {
		l.marks = append(l.marks, l.mark())
		l.stats.Sent++
		if l.draw(l.faults.Loss) {
			l.stats.Lost++
			continue
		}
		copies := 1
		if l.draw(l.faults.Duplicate) {
			l.stats.Duplicated++
			copies = 2
		}
		for range copies {
			l.queue(f, now)
		}
	}
	l.marks = append(l.marks, l.mark())
	var (
		n   int
		err error
	)
	if len(l.out) > 0 {
		n, err = l.inner.Send(l.out)
		n = max(0, min(n, len(l.out)))
	}
	taken := len(frames)
	if n < len(l.out) {
		// The copy out[n] was refused: its frame k is not taken unless
		// a copy made for it went before.
		k := 0
		for l.marks[k+1].out <= n {
			k++
		}
		taken = k
		if n > l.marks[k].out {
			taken = k + 1
		}
	}
	l.settle(n, taken, now)
	return taken, err
}

// queue applies Corrupt and Reorder to one copy of f and sends or holds it.
func (l *Link) queue(f []byte, now time.Duration) {
	bit := -1
	if len(f) > 0 && l.draw(l.faults.Corrupt) {
		bit = l.rng.IntN(len(f) * 8)
		l.stats.Corrupted++
	}
	at := now + l.faults.Delay
	seq := l.seq
	l.seq++
	reordered := false
	if l.faults.ReorderDelay > 0 {
		if l.draw(l.faults.Reorder) {
			at += 1 + time.Duration(l.rng.Int64N(int64(l.faults.ReorderDelay)))
			reordered = true
		}
	} else if l.held < 0 && l.draw(l.faults.Reorder) {
		l.held = l.copyIn(f, bit, at, seq)
		l.stats.Reordered++
		return
	}
	if at > now {
		if len(l.heap)+len(l.stage) < l.capacity {
			l.stage = append(l.stage, l.copyIn(f, bit, at, seq))
			if reordered {
				l.stats.Reordered++
			} else {
				l.stats.Delayed++
			}
			l.unswap(at, false)
			return
		}
		l.stats.Overflow++
	}
	if bit >= 0 {
		s := l.copyIn(f, bit, now, seq)
		l.out = append(l.out, l.slots[s].buf)
		l.outSlot = append(l.outSlot, s)
	} else {
		l.out = append(l.out, f)
		l.outSlot = append(l.outSlot, -1)
	}
	l.unswap(now, true)
}

// unswap lets the frame held for a swap go behind the copy just queued,
// due at at: at once, or staged to be held.
func (l *Link) unswap(at time.Duration, now bool) {
	h := l.held
	if h < 0 {
		return
	}
	l.held = -1
	s := &l.slots[h]
	s.at = max(s.at, at)
	s.seq = l.seq
	l.seq++
	if now {
		l.out = append(l.out, s.buf)
		l.outSlot = append(l.outSlot, h)
	} else {
		l.stage = append(l.stage, h)
	}
}

func (l *Link) mark() mark {
	m := mark{pcg: *l.pcg, stats: l.stats, out: len(l.out), stage: len(l.stage), held: l.held}
	if l.held >= 0 {
		m.heldAt, m.heldSeq = l.slots[l.held].at, l.slots[l.held].seq
	}
	return m
}

// settle finishes a send after the wrapped link took out[:n]: the first
// taken frames keep their fate, the rest are undone. Copies refused that
// belong to a taken frame (a duplicate, or the swapped frame behind it)
// are held, due now.
func (l *Link) settle(n, taken int, now time.Duration) {
	m := &l.marks[taken]
	*l.pcg = m.pcg
	delivered := l.stats.Delivered
	l.stats = m.stats
	l.stats.Delivered = delivered + uint64(n)
	for i, s := range l.outSlot {
		switch {
		case i < n:
			if s >= 0 {
				l.freeSlot(s)
			}
		case i < m.out:
			if s < 0 {
				s = l.copyIn(l.out[i], -1, now, 0)
			}
			l.slots[s].at, l.slots[s].seq = now, l.seq
			l.seq++
			l.push(s)
		default:
			if s >= 0 && s != m.held {
				l.freeSlot(s)
			}
		}
	}
	for i, s := range l.stage {
		switch {
		case i < m.stage:
			l.push(s)
		case s != m.held:
			l.freeSlot(s)
		}
	}
	if l.held >= 0 && l.held != m.held {
		l.freeSlot(l.held)
	}
	l.held = m.held
	if l.held >= 0 {
		l.slots[l.held].at, l.slots[l.held].seq = m.heldAt, m.heldSeq
	}
	// Drop the references to the caller's frames.
	clear(l.out)
}

// draw reports true with probability p, consuming no randomness for a fault
// that is off.
func (l *Link) draw(p float64) bool {
	return p > 0 && l.rng.Float64() < p
}

// copyIn copies f into a free slot due at at, flipping bit unless it is -1.
func (l *Link) copyIn(f []byte, bit int, at time.Duration, seq uint64) int32 {
	var idx int32
	if n := len(l.free); n > 0 {
		idx = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		l.slots = append(l.slots, slot{})
		idx = int32(len(l.slots) - 1)
	}
	s := &l.slots[idx]
	if cap(s.buf) < len(f) {
		s.buf = make([]byte, len(f), bufCap(len(f), l.maxFrame))
	}
	s.buf = s.buf[:len(f)]
	copy(s.buf, f)
	if bit >= 0 {
		s.buf[bit>>3] ^= 1 << (bit & 7)
	}
	s.at, s.seq = at, seq
	return idx
}

func (l *Link) freeSlot(idx int32) { l.free = append(l.free, idx) }

// bufCap sizes a new frame buffer: a power of two from 256 so that frames of
// varying length settle on a few reallocations, never beyond maxFrame.
func bufCap(n, maxFrame int) int {
	c := 256
	for c < n {
		c <<= 1
	}
	return max(min(c, maxFrame), n)
}

func (l *Link) less(i, j int32) bool {
	a, b := &l.slots[i], &l.slots[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (l *Link) push(idx int32) {
	l.heap = append(l.heap, idx)
	h := l.heap
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !l.less(h[i], h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (l *Link) pop() {
	h := l.heap
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	l.heap = h
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && l.less(h[r], h[c]) {
			c = r
		}
		if !l.less(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// ParseSpec reads a fault specification such as
// "reorder=5%,reorderdelay=30us,loss=1%" (see link.ParseFaults).
func ParseSpec(s string) (Faults, error) { return link.ParseFaults(s) }
