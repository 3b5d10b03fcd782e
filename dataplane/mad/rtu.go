package mad

// Offsets shared by RTU (IBTA Table 111), DREQ (Table 112), DREP (Table 113)
// and MRA (Table 107): each starts with the two communication IDs.
const (
	idsLocalCommID  = 0
	idsRemoteCommID = 4

	rtuPrivateData  = 8
	dreqRemoteQPN   = 8
	dreqPrivateData = 12
	drepPrivateData = 8
	mraByte8        = 8 // message MRAed:2, reserved:6
	mraByte9        = 9 // service timeout:5, reserved:3
	mraPrivateData  = 10

	// RTUPrivateDataSize is IB_CM_RTU_PRIVATE_DATA_SIZE.
	RTUPrivateDataSize = DataSize - rtuPrivateData // 224
	// DREQPrivateDataSize is IB_CM_DREQ_PRIVATE_DATA_SIZE.
	DREQPrivateDataSize = DataSize - dreqPrivateData // 220
	// DREPPrivateDataSize is IB_CM_DREP_PRIVATE_DATA_SIZE.
	DREPPrivateDataSize = DataSize - drepPrivateData // 224
	// MRAPrivateDataSize is IB_CM_MRA_PRIVATE_DATA_SIZE.
	MRAPrivateDataSize = DataSize - mraPrivateData // 222
)

// RTU is a ready-to-use (IBTA Table 111), sent by the active side after a REP.
type RTU []byte

// RTUFields describes an RTU for Encode.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  []byte // at most RTUPrivateDataSize bytes
}

// IsValid reports whether r is long enough for an RTU.
func (r RTU) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return get32(r, idsLocalCommID) }

// RemoteCommID returns the receiver's communication ID.
func (r RTU) RemoteCommID() uint32 { return get32(r, idsRemoteCommID) }

// PrivateData returns the 224 bytes of private data.
func (r RTU) PrivateData() []byte { return r[rtuPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r RTU) Fields() RTUFields {
	return RTUFields{LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), PrivateData: r.PrivateData()}
}

// Encode writes the whole RTU described by f.
func (r RTU) Encode(f *RTUFields) {
	clear(r[:DataSize])
	put32(r, idsLocalCommID, f.LocalCommID)
	put32(r, idsRemoteCommID, f.RemoteCommID)
	copy(r.PrivateData(), f.PrivateData)
}
