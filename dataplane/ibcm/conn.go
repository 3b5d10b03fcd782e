package ibcm

import "github.com/softfabric/softfabric/dataplane/mad"

// conn is one connection's state: the kernel's cm_id_private, less what
// belongs to the QP.
type conn struct {
	id         uint32 // our comm ID
	remoteID   uint32 // the peer's comm ID, 0 until its REQ or REP
	remoteGUID uint64
	remoteQPN  uint32
	localQPN   uint32
	peer       Peer
	state      State
	active     bool
	maxRetries uint8 // ours for Connect, the REQ's for Accept (cm_req_handler)
	pktLife    uint8 // packet life time exponent of the path
	tid        uint64
	lis        *listener // set while the request counts against its backlog
	service    uint64    // SIDR: the service ID resolved

	// out is the outstanding REQ, REP or DREQ; sends counts its
	// transmissions and mraWait, once the peer sent an MRA, replaces the
	// retransmission wait.
	out      [mad.Size]byte
	sends    int
	mraWait  int64
	retryCap int64 // the longest retransmission wait

	// resp is the answer resent to duplicates: the MRA in MRA_REQ_SENT and
	// MRA_REP_SENT, the RTU once established on the active side.
	resp    [mad.Size]byte
	hasResp bool

	deadline int64 // 0: no timer
	heapIdx  int
	inRemote bool // in Agent.byRemote
	inQP     bool // in Agent.byQP
	inSIDR   bool // in Agent.bySIDR
}

// remoteKey identifies a connection by the peer's comm ID and CA GUID, what
// cm_insert_remote_id keys on to find duplicate REQs and REPs.
type remoteKey struct {
	id   uint32
	guid uint64
}

// qpKey identifies a connection by the peer's QPN and CA GUID, what
// cm_insert_remote_qpn keys on to find stale connections.
type qpKey struct {
	qpn  uint32
	guid uint64
}

type listener struct {
	serviceID uint64
	backlog   int
	pending   int
}

// newID picks a random comm ID, nonzero and not in use.
func (a *Agent) newID() (uint32, bool) {
	for range 64 {
		id := uint32(a.cfg.Rand.Uint64())
		if _, used := a.conns[id]; id != 0 && !used {
			return id, true
		}
	}
	return 0, false
}

func (a *Agent) newTID() uint64 { return a.cfg.Rand.Uint64() }

func (a *Agent) setRemote(c *conn, remoteID uint32, guid uint64, qpn uint32) {
	c.remoteID, c.remoteGUID, c.remoteQPN = remoteID, guid, qpn
	a.byRemote[remoteKey{remoteID, guid}] = c
	c.inRemote = true
	a.byQP[qpKey{qpn, guid}] = c
	c.inQP = true
}

// unpend takes c off its listener's backlog.
func (c *conn) unpend() {
	if c.lis != nil {
		c.lis.pending--
		c.lis = nil
	}
}

// free forgets c.
func (a *Agent) free(c *conn) {
	a.unschedule(c)
	c.unpend()
	if c.inRemote {
		delete(a.byRemote, remoteKey{c.remoteID, c.remoteGUID})
		c.inRemote = false
	}
	a.dropQP(c)
	if c.inSIDR {
		delete(a.bySIDR, sidrKey{c.remoteID, c.peer.GID})
		c.inSIDR = false
	}
	if c.state == StateSIDRREPSent {
		a.sidrHeld--
	}
	delete(a.conns, c.id)
}

func (a *Agent) dropQP(c *conn) {
	if c.inQP {
		delete(a.byQP, qpKey{c.remoteQPN, c.remoteGUID})
		c.inQP = false
	}
}

// lookup returns the connection with local ID local whose peer has comm ID
// remote (cm_acquire_id); remote 0 matches a connection that has not heard
// from its peer yet.
func (a *Agent) lookup(local, remote uint32) *conn {
	c := a.conns[local]
	if c == nil || c.remoteID != remote {
		return nil
	}
	return c
}
