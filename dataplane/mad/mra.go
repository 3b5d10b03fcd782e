package mad

// MRA is a message receipt acknowledgement (IBTA Table 107): "got it, the
// answer will take up to ServiceTimeout".
type MRA []byte

// MRAFields describes an MRA for Encode.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32 // 0 when acknowledging a REQ whose sender ID is all the sender knows
	MessageMRAed   Msg
	ServiceTimeout uint8  // 5 bits
	PrivateData    []byte // at most MRAPrivateDataSize bytes
}

// IsValid reports whether r is long enough for an MRA.
func (r MRA) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's communication ID.
func (r MRA) LocalCommID() uint32 { return get32(r, idsLocalCommID) }

// RemoteCommID returns the receiver's communication ID.
func (r MRA) RemoteCommID() uint32 { return get32(r, idsRemoteCommID) }

// MessageMRAed returns which message is acknowledged.
func (r MRA) MessageMRAed() Msg { return Msg(bits(r, mraByte8, 6, 2)) }

// ServiceTimeout returns the exponent of the extra time the sender asks for.
func (r MRA) ServiceTimeout() uint8 { return bits(r, mraByte9, 3, 5) }

// PrivateData returns the 222 bytes of private data.
func (r MRA) PrivateData() []byte { return r[mraPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r MRA) Fields() MRAFields {
	return MRAFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(),
		MessageMRAed: r.MessageMRAed(), ServiceTimeout: r.ServiceTimeout(),
		PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole MRA described by f.
func (r MRA) Encode(f *MRAFields) {
	clear(r[:DataSize])
	put32(r, idsLocalCommID, f.LocalCommID)
	put32(r, idsRemoteCommID, f.RemoteCommID)
	setBits(r, mraByte8, 6, 2, uint8(f.MessageMRAed))
	setBits(r, mraByte9, 3, 5, f.ServiceTimeout)
	copy(r.PrivateData(), f.PrivateData)
}
