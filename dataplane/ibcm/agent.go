package ibcm

import (
	"errors"
	"math"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// Errors returned by the Agent's methods.
var (
	ErrUnknownID   = errors.New("ibcm: unknown ID")
	ErrState       = errors.New("ibcm: not allowed in the connection's state")
	ErrParam       = errors.New("ibcm: invalid parameter")
	ErrPrivateData = errors.New("ibcm: private data too long")
	ErrListening   = errors.New("ibcm: service ID already has a listener")
	ErrNotListened = errors.New("ibcm: service ID has no listener")
	ErrNoID        = errors.New("ibcm: no free comm ID")
)

// NoDeadline is what Next returns when no timer is set.
const NoDeadline = math.MaxInt64

// Agent runs the CM protocol for one port. It is not safe for concurrent
// use: the caller serialises all calls.
type Agent struct {
	cfg       Config
	conns     map[uint32]*conn
	byRemote  map[remoteKey]*conn
	byQP      map[qpKey]*conn
	listeners map[uint64]*listener
	bySIDR    map[sidrKey]*conn
	sidrHeld  int // IDs in StateSIDRREPSent
	timers    []*conn
	stats     Stats
	scratch   [mad.Size]byte // stateless answers
}

// New returns an agent configured by cfg, with defaults filled in.
func New(cfg Config) *Agent {
	cfg.setDefaults()
	return &Agent{
		cfg:       cfg,
		conns:     make(map[uint32]*conn),
		byRemote:  make(map[remoteKey]*conn),
		byQP:      make(map[qpKey]*conn),
		listeners: make(map[uint64]*listener),
		bySIDR:    make(map[sidrKey]*conn),
	}
}

// Config returns the configuration in use, defaults filled in.
func (a *Agent) Config() Config { return a.cfg }

// Stats returns a copy of the counters.
func (a *Agent) Stats() Stats { return a.stats }

// Len returns the number of live IDs, TimeWait included.
func (a *Agent) Len() int { return len(a.conns) }

// State returns the state of id, or false if id is not live.
func (a *Agent) State(id ID) (State, bool) {
	c := a.conns[uint32(id)]
	if c == nil {
		return 0, false
	}
	return c.state, true
}

// Next returns the earliest timer deadline, which may be past, or
// NoDeadline. Call Tick then.
func (a *Agent) Next(now int64) int64 {
	if len(a.timers) == 0 {
		return NoDeadline
	}
	return a.timers[0].deadline
}

// Tick runs the timers due at now: retransmissions, timeouts and the end
// of TimeWait.
func (a *Agent) Tick(now int64) {
	for len(a.timers) > 0 && a.timers[0].deadline <= now {
		c := a.timers[0]
		a.unschedule(c)
		a.expire(now, c)
	}
}

func (a *Agent) expire(now int64, c *conn) {
	switch {
	case c.state.retransmits():
		if c.sends <= int(c.maxRetries) {
			a.stats.Retransmits[mad.MAD(c.out[:]).AttributeID().CMIndex()]++
			a.transmit(now, c)
			return
		}
		a.retriesExhausted(now, c)
	case c.state.awaitsCaller():
		st := c.state
		a.destroy(c)
		a.stats.Timeouts++
		a.emit(Event{Type: EventTimeout, ID: ID(c.id), Peer: c.peer, State: st, Freed: true})
	case c.state == StateSIDRREPSent:
		a.free(c) // duplicates are over; the caller was done with it
	case c.state == StateTimeWait:
		a.free(c)
		a.emit(Event{Type: EventTimeWaitExit, ID: ID(c.id), Peer: c.peer, State: StateTimeWait, Freed: true})
	}
}

// retriesExhausted ends a connection whose REQ, REP or DREQ went
// unanswered: cm_process_send_error.
func (a *Agent) retriesExhausted(now int64, c *conn) {
	st := c.state
	if st == StateDREQSent {
		a.enterTimeWait(now, c)
		a.emit(Event{Type: EventDisconnected, ID: ID(c.id), Peer: c.peer, State: st, TimedOut: true})
		return
	}
	a.free(c)
	a.stats.Timeouts++
	a.emit(Event{Type: EventTimeout, ID: ID(c.id), Peer: c.peer, State: st, Freed: true})
}

func (a *Agent) emit(e Event) {
	if a.cfg.Event != nil {
		a.cfg.Event(e)
	}
}

func (a *Agent) drop(r DropReason) { a.stats.Dropped[r]++ }

// Receive handles a MAD received from a peer's GSI. Anything malformed,
// unexpected or not for the CM is counted and dropped.
func (a *Agent) Receive(now int64, from Peer, b []byte) {
	m, err := mad.Parse(b)
	switch {
	case errors.Is(err, mad.ErrShort):
		a.drop(DropShort)
		return
	case err != nil:
		a.drop(DropVersion)
		return
	}
	switch err := m.CheckCM(); err {
	case nil:
	case mad.ErrClass:
		a.drop(DropNotCM)
		return
	case mad.ErrClassVersion:
		// The kernel registers for class version 2 only, so its MAD layer
		// drops these before the CM sees them; no REJ.
		a.drop(DropClassVersion)
		return
	default:
		a.drop(DropMethod)
		return
	}
	attr := m.AttributeID()
	i := attr.CMIndex()
	if i < 0 {
		if attr == mad.AttrClassPortInfo {
			a.drop(DropUnsupported)
		} else {
			a.drop(DropAttribute)
		}
		return
	}
	a.stats.Received[i]++
	switch attr {
	case mad.AttrREQ:
		a.handleREQ(now, from, m)
	case mad.AttrMRA:
		a.handleMRA(now, m)
	case mad.AttrREJ:
		a.handleREJ(now, m)
	case mad.AttrREP:
		a.handleREP(now, from, m)
	case mad.AttrRTU:
		a.handleRTU(m)
	case mad.AttrDREQ:
		a.handleDREQ(now, from, m)
	case mad.AttrDREP:
		a.handleDREP(now, m)
	case mad.AttrSIDRREQ:
		a.handleSIDRREQ(now, from, m)
	case mad.AttrSIDRREP:
		a.handleSIDRREP(m)
	default: // LAP, APR
		a.drop(DropUnsupported)
	}
}

// transmit sends c's outstanding message and sets its retransmission timer.
func (a *Agent) transmit(now int64, c *conn) {
	a.send(c.peer, c.out[:])
	c.sends++
	a.schedule(c, now+a.retryWait(c))
}

// retryWait is the wait after the latest transmission of c.out: doubling
// from RetryInterval up to c.retryCap, or the MRA's wait.
func (a *Agent) retryWait(c *conn) int64 {
	if c.mraWait > 0 {
		return c.mraWait
	}
	w, limit := a.cfg.RetryInterval, c.retryCap
	for range c.sends - 1 {
		if w >= limit/2 {
			return limit
		}
		w *= 2
	}
	return min(w, limit)
}

func (a *Agent) send(to Peer, b []byte) {
	m := mad.MAD(b)
	a.stats.Sent[m.AttributeID().CMIndex()]++
	if m.AttributeID() == mad.AttrREJ {
		a.stats.RejectsSent++
	}
	if a.cfg.Send != nil {
		a.cfg.Send(to, b)
	}
}

// resendResp answers a duplicate with c's stored response, if any.
func (a *Agent) resendResp(c *conn) {
	if c.hasResp {
		a.send(c.peer, c.resp[:])
	}
}

// callerDeadline arms the timer of a state that waits on the local caller:
// Config.ActionTimeout, or else the time the peer keeps retransmitting,
// tries × perTry, with perTry capped by Config.MaxMRAWait.
func (a *Agent) callerDeadline(now int64, c *conn, tries int, perTry int64) {
	wait := a.cfg.ActionTimeout
	if wait <= 0 {
		wait = int64(tries) * min(perTry, a.cfg.MaxMRAWait)
	}
	a.schedule(c, now+max(wait, 1))
}

// mraWait is how long a peer waits after our MRA with this service
// timeout (cm_mra_handler: service timeout + packet life time, rounded).
func mraWait(serviceTimeout, pktLife uint8) int64 {
	return kernelMs(serviceTimeout) + kernelMs(pktLife+1)
}
