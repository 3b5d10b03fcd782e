package ibcm

import "github.com/softfabric/softfabric/dataplane/mad"

// DropReason says why a received MAD was dropped.
type DropReason uint8

// Drop reasons.
const (
	DropShort        DropReason = iota // under 256 bytes
	DropVersion                        // base version not 1
	DropNotCM                          // another management class: not ours
	DropClassVersion                   // CM class version not 2
	DropMethod                         // CM method not Send
	DropAttribute                      // not a CM message attribute
	DropInvalid                        // a field the CM checks is wrong (zero comm ID or QPN, DREQ for another QPN)
	DropUnknownID                      // names no live connection
	DropState                          // valid, but not expected in the connection's state
	DropBacklog                        // REQ beyond the listener's backlog
	DropUnsupported                    // LAP, APR, ClassPortInfo
	NumDropReasons
)

var dropNames = [...]string{
	DropShort: "short", DropVersion: "version", DropNotCM: "not CM", DropClassVersion: "class version",
	DropMethod: "method", DropAttribute: "attribute", DropInvalid: "invalid", DropUnknownID: "unknown ID",
	DropState: "state", DropBacklog: "backlog", DropUnsupported: "unsupported",
}

// String returns a short description of r.
func (r DropReason) String() string {
	if r < NumDropReasons {
		return dropNames[r]
	}
	return "drop(?)"
}

// Stats counts what the agent saw and did. Arrays by attribute are indexed
// by mad.AttrID.CMIndex (REQ first, APR last).
type Stats struct {
	Received    [mad.NumCMAttrs]uint64 // CM messages received (right class, version and method)
	Sent        [mad.NumCMAttrs]uint64 // MADs handed to Send, retransmissions included
	Retransmits [mad.NumCMAttrs]uint64 // of which retransmissions of REQ, REP and DREQ
	Dropped     [NumDropReasons]uint64 // MADs dropped, by reason
	Duplicates  uint64                 // duplicate MADs, answered or ignored as the state says
	RejectsSent uint64                 // REJs sent, stateless ones included
	Timeouts    uint64                 // EventTimeout reported
}

// Malformed returns the number of MADs dropped for their format: too short,
// wrong version, class version, method or attribute, or a bad field.
func (s *Stats) Malformed() uint64 {
	return s.Dropped[DropShort] + s.Dropped[DropVersion] + s.Dropped[DropClassVersion] +
		s.Dropped[DropMethod] + s.Dropped[DropAttribute] + s.Dropped[DropInvalid]
}
