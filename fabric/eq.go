package fabric

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventConnReq: a connection request reached a passive endpoint.
	// Event.Info describes it: open an endpoint with it and Accept, or
	// Reject it.
	EventConnReq EventKind = iota + 1
	// EventConnected: an endpoint's connection is up.
	EventConnected
	// EventShutdown: the peer disconnected (or the connection broke).
	EventShutdown
	// EventRejected: the peer rejected a Connect; Data is its private data.
	EventRejected
	// EventUser: written by the application (EQ.Write).
	EventUser
)

func (k EventKind) String() string {
	return [...]string{"?", "connreq", "connected", "shutdown", "rejected", "user"}[min(int(k), 5)]
}

// Event is an entry of an event queue.
type Event struct {
	Kind EventKind
	// EP is the endpoint the event is about (Connected, Shutdown,
	// Rejected).
	EP *Endpoint
	// Info is a connection request's offer (ConnReq).
	Info *Info
	// Data is the peer's private data (ConnReq, Connected, Rejected).
	Data []byte
	// Err says why a connection ended or failed, if it did not end
	// cleanly.
	Err error
	// Context is the application's (EventUser).
	Context uint64
}

// EQ is an event queue: connection management events, in order.
type EQ struct {
	mu     sync.Mutex
	events []Event
	size   int
	ready  chan struct{}
	refs   refs
	fab    *Fabric

	overruns atomic.Uint64
}

// EQ opens an event queue holding up to size events.
func (f *Fabric) EQ(size int) (*EQ, error) {
	if size <= 0 {
		return nil, fmt.Errorf("opening an EQ: %w: size %d", ErrInvalid, size)
	}
	if err := f.refs.add(); err != nil {
		return nil, err
	}
	return &EQ{size: size, ready: make(chan struct{}, 1), fab: f}, nil
}

// Write appends an event; ErrAgain when the EQ is full.
func (q *EQ) Write(e Event) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.refs.isClosed() {
		return ErrClosed
	}
	if len(q.events) >= q.size {
		return ErrAgain
	}
	q.events = append(q.events, e)
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// post appends a provider event, waiting for room rather than dropping
// it (the application reads the EQ to make room).
func (q *EQ) post(ctx context.Context, e Event) {
	for q.Write(e) == ErrAgain {
		select {
		case <-ctx.Done():
			return
		case <-q.ready:
		}
	}
}

// offer appends a provider event about an endpoint without waiting: a
// full EQ loses it and counts it in Overruns (the application sized the
// EQ too small for the connections it runs).
func (q *EQ) offer(e Event) {
	if q.Write(e) != nil {
		q.overruns.Add(1)
	}
}

// Overruns counts events lost because the EQ was full.
func (q *EQ) Overruns() uint64 { return q.overruns.Load() }

// Poll returns the next event without waiting: ErrAgain if none.
func (q *EQ) Poll() (Event, error) { return q.take(true) }

// Peek returns the next event and leaves it queued: ErrAgain if none.
func (q *EQ) Peek() (Event, error) { return q.take(false) }

func (q *EQ) take(remove bool) (Event, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) == 0 {
		if q.refs.isClosed() {
			return Event{}, ErrClosed
		}
		return Event{}, ErrAgain
	}
	e := q.events[0]
	if remove {
		q.events = q.events[1:]
		if len(q.events) > 0 {
			select {
			case q.ready <- struct{}{}:
			default:
			}
		}
	}
	return e, nil
}

// Read waits for the next event until ctx ends.
func (q *EQ) Read(ctx context.Context) (Event, error) {
	for {
		e, err := q.Poll()
		if err != ErrAgain {
			return e, err
		}
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-q.ready:
		}
	}
}

// Close closes the EQ; ErrBusy while endpoints are bound to it.
func (q *EQ) Close() error {
	first, err := q.refs.closing()
	if first {
		q.fab.refs.done()
	}
	return err
}
