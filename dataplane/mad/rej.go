package mad

// REJ byte offsets (IBTA Table 108; CM_REJ_* in ibta_vol1_c12.h).
const (
	rejLocalCommID  = 0
	rejRemoteCommID = 4
	rejByte8        = 8 // message rejected:2, reserved:6
	rejByte9        = 9 // reject info length:7, reserved:1
	rejReason       = 10
	rejARI          = 12
	rejPrivateData  = 84

	// ARISize is IB_CM_REJ_ARI_LENGTH, the room for additional reject
	// information.
	ARISize = rejPrivateData - rejARI // 72
	// REJPrivateDataSize is IB_CM_REJ_PRIVATE_DATA_SIZE.
	REJPrivateDataSize = DataSize - rejPrivateData // 148
)

// REJ is a connection reject (IBTA Table 108).
type REJ []byte

// REJFields describes a REJ for Encode.
type REJFields struct {
	LocalCommID     uint32 // the rejecter's ID, 0 when it kept no state
	RemoteCommID    uint32 // the ID of the side being rejected
	MessageRejected Msg
	Reason          RejectReason
	ARI             []byte // additional reject information, at most ARISize bytes
	PrivateData     []byte // at most REJPrivateDataSize bytes
}

// IsValid reports whether r is long enough for a REJ.
func (r REJ) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the rejecter's communication ID.
func (r REJ) LocalCommID() uint32 { return get32(r, rejLocalCommID) }

// RemoteCommID returns the communication ID of the rejected side.
func (r REJ) RemoteCommID() uint32 { return get32(r, rejRemoteCommID) }

// MessageRejected returns which message is rejected.
func (r REJ) MessageRejected() Msg { return Msg(bits(r, rejByte8, 6, 2)) }

// RejectInfoLength returns the length of the valid ARI bytes as sent; it
// may exceed ARISize in a malformed REJ.
func (r REJ) RejectInfoLength() uint8 { return bits(r, rejByte9, 1, 7) }

// Reason returns the reject reason.
func (r REJ) Reason() RejectReason { return RejectReason(get16(r, rejReason)) }

// ARI returns the additional reject information, cut to RejectInfoLength.
func (r REJ) ARI() []byte {
	return r[rejARI : rejARI+min(int(r.RejectInfoLength()), ARISize) : rejPrivateData]
}

// PrivateData returns the 148 bytes of private data.
func (r REJ) PrivateData() []byte { return r[rejPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. ARI and PrivateData alias r.
func (r REJ) Fields() REJFields {
	return REJFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(),
		MessageRejected: r.MessageRejected(), Reason: r.Reason(), ARI: r.ARI(),
		PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole REJ described by f, with RejectInfoLength set to
// the length of f.ARI (cut to ARISize).
func (r REJ) Encode(f *REJFields) {
	clear(r[:DataSize])
	put32(r, rejLocalCommID, f.LocalCommID)
	put32(r, rejRemoteCommID, f.RemoteCommID)
	setBits(r, rejByte8, 6, 2, uint8(f.MessageRejected))
	n := copy(r[rejARI:rejPrivateData], f.ARI)
	setBits(r, rejByte9, 1, 7, uint8(n))
	put16(r, rejReason, uint16(f.Reason))
	copy(r.PrivateData(), f.PrivateData)
}
