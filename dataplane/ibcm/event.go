package ibcm

import "github.com/softfabric/softfabric/dataplane/mad"

// ID names a connection: our local communication ID, random, nonzero and
// unique among the agent's live IDs. It becomes invalid when an event with
// Freed set is reported for it, or when Destroy returns.
type ID uint32

// EventType says what happened.
type EventType uint8

// Events.
const (
	// EventRequest: a REQ for a listened service arrived (passive). Answer
	// with Accept, Reject or SendMRA. Request holds the REQ.
	EventRequest EventType = iota + 1
	// EventReply: the peer accepted our REQ (active). Reply holds the REP;
	// bring the QP to RTS, then call SendRTU (or Reject).
	EventReply
	// EventEstablished: the peer's RTU arrived, or the caller reported
	// traffic with Established (passive). PrivateData is the RTU's.
	EventEstablished
	// EventRejected: the peer sent a REJ. Reject holds it; its Reason is
	// what rdma_cm reports as RDMA_CM_EVENT_REJECTED's status.
	EventRejected
	// EventTimeout: the peer did not answer our REQ, REP or SIDR_REQ
	// after all retransmissions, or the caller did not act on a request,
	// SIDR request or reply in time (Config.ActionTimeout). State says
	// which; the ID is freed.
	EventTimeout
	// EventDisconnectRequest: the peer sent a DREQ; the agent has answered
	// with a DREP and the ID is in TimeWait. PrivateData is the DREQ's.
	EventDisconnectRequest
	// EventDisconnected: our DREQ was answered (PrivateData is the DREP's)
	// or crossed the peer's, or went unanswered (TimedOut); the ID is in
	// TimeWait.
	EventDisconnected
	// EventTimeWaitExit: TimeWait is over and the ID is freed.
	EventTimeWaitExit
	// EventSIDRRequest: a SIDR_REQ for a listened service arrived (a UD
	// "connection", rdma_cm's port space UDP). Answer with SIDRReply.
	// SIDRRequest holds it.
	EventSIDRRequest
	// EventSIDRReply: the answer to our SIDR_REQ arrived; SIDRReply holds
	// it (its Status says whether the service was resolved). The ID is
	// freed.
	EventSIDRReply
)

var eventNames = [...]string{
	EventRequest: "Request", EventReply: "Reply", EventEstablished: "Established",
	EventRejected: "Rejected", EventTimeout: "Timeout",
	EventDisconnectRequest: "DisconnectRequest", EventDisconnected: "Disconnected",
	EventTimeWaitExit: "TimeWaitExit", EventSIDRRequest: "SIDRRequest", EventSIDRReply: "SIDRReply",
}

// String returns the name of t.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "event(?)"
}

// Event is a connection event. Slices in it alias the received MAD and are
// valid only while the Event callback runs.
type Event struct {
	Type EventType
	ID   ID
	Peer Peer
	// State is the state the ID was in when the event happened.
	State State
	// Freed reports that the ID no longer exists after this event.
	Freed bool
	// TimedOut marks an EventDisconnected whose DREQ got no DREP.
	TimedOut bool

	Request     mad.REQFields     // EventRequest
	Reply       mad.REPFields     // EventReply
	Reject      mad.REJFields     // EventRejected
	SIDRRequest mad.SIDRREQFields // EventSIDRRequest
	SIDRReply   mad.SIDRREPFields // EventSIDRReply
	PrivateData []byte            // EventEstablished, EventDisconnectRequest, EventDisconnected
}
