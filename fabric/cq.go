package fabric

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Addr is an address vector index (libfabric's fi_addr_t).
type Addr uint64

// AddrUnspec is "any source" in a receive, and the source of a completion
// whose sender is not known.
const AddrUnspec = ^Addr(0)

// Completion reports a finished operation.
type Completion struct {
	// Context is the per-operation context given when it was posted.
	Context uint64
	// Flags say what completed (FlagSend|FlagMsg, FlagRecv|FlagTagged,
	// FlagRMA|FlagWrite, ...), with FlagRemoteCQData when Data is set.
	Flags Flags
	// Len is the length of the received message (receives only).
	Len int
	// Buf is where it landed: for a multi-receive buffer, the part this
	// message filled.
	Buf []byte
	// Data is the sender's remote CQ data (FlagRemoteCQData).
	Data uint64
	// Tag is the tag of a tagged receive.
	Tag uint64
	// Src is the sender (endpoints with CapSource), else AddrUnspec.
	Src Addr
	// Status is the outcome; Err returns it as an error.
	Status Status
}

// Err returns nil for a successful completion, else a preallocated
// *CompletionError matching ErrCanceled, ErrTruncated, ErrRemoteAccess ...
// with errors.Is.
func (c *Completion) Err() error { return c.Status.Err() }

// CQ is a completion queue. Endpoints post their completions to it; the
// application reads them in batches into its own slice.
type CQ struct {
	d     *Domain
	rings []*compRing // one per worker: each has a single producer
	next  int         // the ring to read first, for fairness
	mu    sync.Mutex  // readers, with ThreadSafe
	refs  refs
	size  int

	// Blocking readers park on an eventfd through the runtime's poller.
	efd     *os.File
	rawEfd  int
	waiters atomic.Int32
	// workers has bit w set when an endpoint of worker w is bound.
	workers  atomic.Uint64
	overruns atomic.Uint64
	// committed is how many operations bound endpoints may have
	// outstanding.
	committed int
	one       [8]byte
}

// compRing is a single-producer, single-consumer ring of completions.
type compRing struct {
	buf  []Completion
	mask uint64
	_    [64]byte
	head atomic.Uint64 // consumer
	_    [56]byte
	tail atomic.Uint64 // producer
	_    [56]byte
}

// CQ opens a completion queue of size entries (rounded up to a power of
// two) per worker. A full CQ stops its endpoints' completions, not loses
// them: they wait in the endpoints until it is read.
func (d *Domain) CQ(size int) (*CQ, error) {
	if size <= 0 || size > 1<<20 {
		return nil, fmt.Errorf("opening a CQ: %w: size %d", ErrInvalid, size)
	}
	n := 1
	for n < size {
		n <<= 1
	}
	if err := d.refs.add(); err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		d.refs.done()
		return nil, fmt.Errorf("opening a CQ: eventfd: %w", err)
	}
	q := &CQ{d: d, size: n, efd: os.NewFile(uintptr(efd), "cq-eventfd"), rawEfd: efd}
	q.one[0] = 1
	for range d.workers {
		q.rings = append(q.rings, &compRing{buf: make([]Completion, n), mask: uint64(n - 1)})
	}
	return q, nil
}

// room is how many completions worker w may still push.
func (q *CQ) room(w int) int {
	r := q.rings[w]
	return len(r.buf) - int(r.tail.Load()-r.head.Load())
}

// fit bounds a batch of n completions that worker w is about to report to
// what the CQ has room for: completions that do not fit stay where they
// are (in the transport's queues) until the application reads. A nil CQ
// (none bound) takes any number.
func (q *CQ) fit(w, n int) int {
	if q == nil {
		return n
	}
	return min(n, q.room(w))
}

// push appends c to worker w's ring. Callers check room first; a
// completion that still finds the ring full (a CQ shared beyond its
// size, multi-receive or remote-write completions) is dropped and
// counted in Overruns.
func (q *CQ) push(w int, c *Completion) {
	r := q.rings[w]
	t := r.tail.Load()
	if t-r.head.Load() >= uint64(len(r.buf)) {
		q.overruns.Add(1)
		q.d.overruns.Add(1)
		return
	}
	r.buf[t&r.mask] = *c
	r.tail.Store(t + 1)
}

// Overruns counts completions lost because the CQ was full: a CQ must
// hold every operation its endpoints may have outstanding (Bind checks
// transmit and receive queue sizes against it).
func (q *CQ) Overruns() uint64 { return q.overruns.Load() }

// signal wakes blocked readers after a worker pushed completions.
func (q *CQ) signal() {
	if q.waiters.Load() > 0 {
		_, _ = unix.Write(q.rawEfd, q.one[:])
	}
}

// progress drives, with manual progress, the workers of the endpoints
// bound to the CQ and those no endpoint uses: a goroutine per CQ (and
// endpoint, each on its own worker) then drives its own worker only.
func (q *CQ) progress() {
	mine := q.workers.Load()
	for _, w := range q.d.workers {
		if mine&(1<<(w.id%64)) != 0 || w.idle() {
			w.progress()
		}
	}
}

// Read moves up to len(out) completions into out and returns how many.
// An empty CQ returns 0. With manual progress it first drives the
// transport.
func (q *CQ) Read(out []Completion) int {
	if q.d.manual {
		q.progress()
	}
	if q.d.safe {
		q.mu.Lock()
		defer q.mu.Unlock()
	}
	return q.read(out)
}

func (q *CQ) read(out []Completion) int {
	n := 0
	for i := 0; i < len(q.rings) && n < len(out); i++ {
		r := q.rings[(q.next+i)%len(q.rings)]
		h := r.head.Load()
		avail := int(r.tail.Load() - h)
		k := min(avail, len(out)-n)
		for j := 0; j < k; j++ {
			out[n+j] = r.buf[(h+uint64(j))&r.mask]
		}
		r.head.Store(h + uint64(k))
		n += k
	}
	if len(q.rings) > 1 {
		q.next = (q.next + 1) % len(q.rings)
	}
	return n
}

// Len is how many completions wait to be read.
func (q *CQ) Len() int {
	n := 0
	for _, r := range q.rings {
		n += int(r.tail.Load() - r.head.Load())
	}
	return n
}

// spinReads is how many empty reads ReadContext makes before it parks.
const spinReads = 200

// ReadContext reads like Read but waits for at least one completion, until
// ctx ends (returning ctx's error). It spins briefly, then parks the
// goroutine on an eventfd (automatic progress) without holding an OS
// thread, or keeps driving the transport with pauses (manual progress).
func (q *CQ) ReadContext(ctx context.Context, out []Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("%w: empty slice", ErrInvalid)
	}
	for i := 0; ; i++ {
		if n := q.Read(out); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if i < spinReads {
			continue
		}
		if err := q.d.goneErr(); err != nil && q.Len() == 0 {
			return 0, err
		}
		if q.d.manual {
			if i < 4*spinReads {
				runtime.Gosched()
			} else {
				q.sleep(ctx)
			}
			continue
		}
		if err := q.park(ctx); err != nil {
			return 0, err
		}
	}
}

// sleep waits, with manual progress, for the transport to have something
// to do: in the kernel on the worker's socket when the CQ's endpoints are
// all on one worker (as a goroutine per worker has them), else briefly.
func (q *CQ) sleep(ctx context.Context) {
	mine := q.workers.Load()
	if mine == 0 || mine&(mine-1) != 0 || len(q.d.workers) > 64 {
		time.Sleep(20 * time.Microsecond)
		return
	}
	w := 0
	for mine>>w != 1 {
		w++
	}
	// One goroutine at a time sleeps in a worker (its sleeper is not made
	// for two), holding the worker's progress lock meanwhile: another
	// reader waits briefly instead, a post wakes the sleeper.
	wk := q.d.workers[w]
	if !wk.progMu.TryLock() {
		time.Sleep(20 * time.Microsecond)
		return
	}
	defer wk.progMu.Unlock()
	timeout := time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	q.d.dev.SleepWorker(w, timeout)
}

// park waits for a worker's signal: announce the wait, look once more,
// then block on the eventfd.
func (q *CQ) park(ctx context.Context) error {
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	if q.Len() > 0 || q.d.goneErr() != nil {
		return nil // the caller looks again
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = q.efd.SetReadDeadline(dl)
	} else {
		_ = q.efd.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	}
	stop := context.AfterFunc(ctx, func() { _ = q.efd.SetReadDeadline(time.Now()) })
	defer stop()
	var b [8]byte
	_, err := q.efd.Read(b[:])
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// Close closes the CQ. It fails with ErrBusy while endpoints are bound to
// it. Closing twice is not an error.
func (q *CQ) Close() error {
	first, err := q.refs.closing()
	if !first {
		return err
	}
	q.d.refs.done()
	return q.efd.Close()
}

func (q *CQ) uncommit(n int) {
	q.refs.mu.Lock()
	q.committed -= n
	q.refs.mu.Unlock()
}
