package mad

// REP byte offsets (IBTA Table 110; CM_REP_* in ibta_vol1_c12.h).
const (
	repLocalCommID  = 0
	repRemoteCommID = 4
	repLocalQKey    = 8
	repLocalQPN     = 12 // QPN:24, ECE vendor ID bits 23:16
	repLocalEECN    = 16 // EECN:24, ECE vendor ID bits 15:8
	repStartingPSN  = 20 // PSN:24, ECE vendor ID bits 7:0
	repRespRes      = 24
	repInitDepth    = 25
	repByte26       = 26 // target ACK delay:5, failover accepted:2, E2E flow control:1
	repByte27       = 27 // RNR retry count:3, SRQ:1, reserved:4
	repLocalCAGUID  = 28
	repPrivateData  = 36

	// REPPrivateDataSize is IB_CM_REP_PRIVATE_DATA_SIZE.
	REPPrivateDataSize = DataSize - repPrivateData // 196
)

// REP is a connection reply (IBTA Table 110).
type REP []byte

// REPFields describes a REP for Encode.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits
	StartingPSN         uint32 // 24 bits
	VendorID            uint32 // 24 bits, spread over the low bytes of the three words above
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         []byte // at most REPPrivateDataSize bytes
}

// IsValid reports whether r is long enough for a REP.
func (r REP) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's (the passive side's) communication ID.
func (r REP) LocalCommID() uint32 { return get32(r, repLocalCommID) }

// RemoteCommID returns the communication ID of the REQ being answered.
func (r REP) RemoteCommID() uint32 { return get32(r, repRemoteCommID) }

// LocalQKey returns the sender's Q_Key (RD only).
func (r REP) LocalQKey() uint32 { return get32(r, repLocalQKey) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return get24(r, repLocalQPN) }

// LocalEECN returns the sender's EE context number (XRC: the SRQ number).
func (r REP) LocalEECN() uint32 { return get24(r, repLocalEECN) }

// StartingPSN returns the PSN the sender will start sending with.
func (r REP) StartingPSN() uint32 { return get24(r, repStartingPSN) }

// VendorID returns the 24-bit ECE vendor ID (CM_REP_VENDOR_ID_H/M/L).
func (r REP) VendorID() uint32 {
	return uint32(r[repLocalQPN+3])<<16 | uint32(r[repLocalEECN+3])<<8 | uint32(r[repStartingPSN+3])
}

// ResponderResources returns the sender's responder resources.
func (r REP) ResponderResources() uint8 { return r[repRespRes] }

// InitiatorDepth returns the sender's initiator depth.
func (r REP) InitiatorDepth() uint8 { return r[repInitDepth] }

// TargetACKDelay returns the sender's CA ACK delay exponent.
func (r REP) TargetACKDelay() uint8 { return bits(r, repByte26, 3, 5) }

// FailoverAccepted returns the 2-bit failover (alternate path) answer.
func (r REP) FailoverAccepted() uint8 { return bits(r, repByte26, 1, 2) }

// EndToEndFlowControl returns the sender's end-to-end flow control bit.
func (r REP) EndToEndFlowControl() bool { return flag(r, repByte26, 0x01) }

// RNRRetryCount returns the RNR retry count for the receiver's QP.
func (r REP) RNRRetryCount() uint8 { return bits(r, repByte27, 5, 3) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REP) SRQ() bool { return flag(r, repByte27, 0x10) }

// LocalCAGUID returns the sender's CA GUID.
func (r REP) LocalCAGUID() uint64 { return get64(r, repLocalCAGUID) }

// PrivateData returns the 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[repPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(),
		VendorID: r.VendorID(), ResponderResources: r.ResponderResources(),
		InitiatorDepth: r.InitiatorDepth(), TargetACKDelay: r.TargetACKDelay(),
		FailoverAccepted: r.FailoverAccepted(), EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(), LocalCAGUID: r.LocalCAGUID(),
		PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole REP described by f, reserved bits zero.
func (r REP) Encode(f *REPFields) {
	clear(r[:DataSize])
	put32(r, repLocalCommID, f.LocalCommID)
	put32(r, repRemoteCommID, f.RemoteCommID)
	put32(r, repLocalQKey, f.LocalQKey)
	put32(r, repLocalQPN, f.LocalQPN<<8|f.VendorID>>16&0xff)
	put32(r, repLocalEECN, f.LocalEECN<<8|f.VendorID>>8&0xff)
	put32(r, repStartingPSN, f.StartingPSN<<8|f.VendorID&0xff)
	r[repRespRes] = f.ResponderResources
	r[repInitDepth] = f.InitiatorDepth
	setBits(r, repByte26, 3, 5, f.TargetACKDelay)
	setBits(r, repByte26, 1, 2, f.FailoverAccepted)
	setFlag(r, repByte26, 0x01, f.EndToEndFlowControl)
	setBits(r, repByte27, 5, 3, f.RNRRetryCount)
	setFlag(r, repByte27, 0x10, f.SRQ)
	put64(r, repLocalCAGUID, f.LocalCAGUID)
	copy(r.PrivateData(), f.PrivateData)
}
