package ibcm

// State is a connection's CM state (enum ib_cm_state, less Idle and Listen,
// which have no ID here), or a service ID resolution's.
type State uint8

// States. "Sent" and "Rcvd" say which side sent the message named.
const (
	StateREQSent     State = iota + 1 // active: REQ out, retransmitted
	StateMRAREQRcvd                   // active: the peer asked for more time
	StateREQRcvd                      // passive: request reported, caller to answer
	StateMRAREQSent                   // passive: we asked for more time
	StateREPSent                      // passive: REP out, retransmitted until RTU
	StateMRAREPRcvd                   // passive: the peer asked for more time
	StateREPRcvd                      // active: reply reported, caller to send RTU
	StateMRAREPSent                   // active: we asked for more time
	StateEstablished                  // both: connected
	StateDREQSent                     // both: DREQ out, retransmitted until DREP
	StateDREQRcvd                     // both: answering a DREQ (transient: the DREP goes at once)
	StateTimeWait                     // both: disconnected, answering stragglers
	StateSIDRREQSent                  // SIDR requester: SIDR_REQ out, retransmitted
	StateSIDRREQRcvd                  // SIDR responder: request reported, caller to answer
	StateSIDRREPSent                  // SIDR responder: answered, answering duplicates
)

var stateNames = [...]string{
	StateREQSent: "REQ_SENT", StateMRAREQRcvd: "MRA_REQ_RCVD", StateREQRcvd: "REQ_RCVD",
	StateMRAREQSent: "MRA_REQ_SENT", StateREPSent: "REP_SENT", StateMRAREPRcvd: "MRA_REP_RCVD",
	StateREPRcvd: "REP_RCVD", StateMRAREPSent: "MRA_REP_SENT", StateEstablished: "ESTABLISHED",
	StateDREQSent: "DREQ_SENT", StateDREQRcvd: "DREQ_RCVD", StateTimeWait: "TIMEWAIT",
	StateSIDRREQSent: "SIDR_REQ_SENT", StateSIDRREQRcvd: "SIDR_REQ_RCVD", StateSIDRREPSent: "SIDR_REP_SENT",
}

// String returns the kernel's name for s (IB_CM_<name>).
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "state(?)"
}

// retransmits reports whether s has an outstanding REQ, REP or DREQ.
func (s State) retransmits() bool {
	switch s {
	case StateREQSent, StateMRAREQRcvd, StateREPSent, StateMRAREPRcvd, StateDREQSent, StateSIDRREQSent:
		return true
	}
	return false
}

// awaitsCaller reports whether s waits on the local caller.
func (s State) awaitsCaller() bool {
	switch s {
	case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent, StateSIDRREQRcvd:
		return true
	}
	return false
}
