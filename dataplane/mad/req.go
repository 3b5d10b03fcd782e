package mad

// REQ byte offsets within the class data (IBTA Table 106; CM_REQ_* in
// include/rdma/ibta_vol1_c12.h).
const (
	reqLocalCommID  = 0
	reqVendorID     = 4 // low 24 bits of the word at 4 (ECE vendor ID; IBTA reserved)
	reqServiceID    = 8
	reqLocalCAGUID  = 16
	reqLocalQKey    = 28
	reqLocalQPN     = 32 // QPN:24, responder resources:8
	reqRespRes      = 35
	reqLocalEECN    = 36 // EECN:24, initiator depth:8
	reqInitDepth    = 39
	reqRemoteEECN   = 40 // EECN:24, then byte 43
	reqByte43       = 43 // remote CM response timeout:5, transport:2, E2E flow control:1
	reqStartingPSN  = 44 // PSN:24, then byte 47
	reqByte47       = 47 // local CM response timeout:5, retry count:3
	reqPKey         = 48
	reqByte50       = 50 // path MTU:4, RDC exists:1, RNR retry count:3
	reqByte51       = 51 // max CM retries:4, SRQ:1, extended transport type:3
	reqPrimaryPath  = 52
	reqAltPath      = 96
	reqSAPSupported = 139 // bit 0x04 of the alternate path's last byte
	reqPrivateData  = 140

	// REQPrivateDataSize is IB_CM_REQ_PRIVATE_DATA_SIZE.
	REQPrivateDataSize = DataSize - reqPrivateData // 92
)

// Path offsets within a REQ path (primary at 52, alternate at 96).
const (
	pathLocalLID  = 0
	pathRemoteLID = 2
	pathLocalGID  = 4
	pathRemoteGID = 20
	pathFlowWord  = 36 // flow label:20, reserved:6, packet rate:6
	pathTClass    = 40
	pathHopLimit  = 41
	pathByte42    = 42 // SL:4, subnet local:1, reserved:3
	pathByte43    = 43 // local ACK timeout:5, reserved:3 (alternate: SAP supported:1)

	// PathSize is the size of one path in a REQ.
	PathSize = 44
)

// PermissiveLID is the LID the kernel puts in a REQ when the path's hop
// limit is above 1 (cm_format_req: "Work-around until there's a way to
// obtain remote LID info"), which is every routed RoCEv2 path.
const PermissiveLID = 0xFFFF

// REQ is a connection request (IBTA Table 106) over a MAD's class data.
type REQ []byte

// REQFields describes a REQ for Encode.
type REQFields struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits; Linux's ECE vendor ID, zero without ECE
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	Transport               Transport
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits; 1 with TransportXRC
	Primary                 PathFields
	Alternate               PathFields
	SAPSupported            bool
	PrivateData             []byte // at most REQPrivateDataSize bytes; longer is cut
}

// IsValid reports whether r is long enough for a REQ.
func (r REQ) IsValid() bool { return len(r) >= DataSize }

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return get32(r, reqLocalCommID) }

// VendorID returns the 24-bit ECE vendor ID Linux puts in reserved bits.
func (r REQ) VendorID() uint32 { return get32(r, reqVendorID) & mask24 }

// ServiceID returns the service ID being connected to.
func (r REQ) ServiceID() uint64 { return get64(r, reqServiceID) }

// LocalCAGUID returns the sender's CA (node) GUID.
func (r REQ) LocalCAGUID() uint64 { return get64(r, reqLocalCAGUID) }

// LocalQKey returns the sender's Q_Key (RD only).
func (r REQ) LocalQKey() uint32 { return get32(r, reqLocalQKey) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return get24(r, reqLocalQPN) }

// ResponderResources returns how many RDMA reads and atomics the sender
// accepts in flight as responder.
func (r REQ) ResponderResources() uint8 { return r[reqRespRes] }

// LocalEECN returns the sender's EE context number (RD only).
func (r REQ) LocalEECN() uint32 { return get24(r, reqLocalEECN) }

// InitiatorDepth returns how many RDMA reads and atomics the sender will
// have in flight as requester.
func (r REQ) InitiatorDepth() uint8 { return r[reqInitDepth] }

// RemoteEECN returns the receiver's EE context number (RD only).
func (r REQ) RemoteEECN() uint32 { return get24(r, reqRemoteEECN) }

// RemoteCMResponseTimeout returns the exponent of the time within which the
// receiver should answer (REP, REJ or MRA).
func (r REQ) RemoteCMResponseTimeout() uint8 { return bits(r, reqByte43, 3, 5) }

// Transport returns the transport service type.
func (r REQ) Transport() Transport { return Transport(bits(r, reqByte43, 1, 2)) }

// EndToEndFlowControl reports the sender's end-to-end flow control bit.
func (r REQ) EndToEndFlowControl() bool { return flag(r, reqByte43, 0x01) }

// StartingPSN returns the PSN the sender will start sending with; the
// receiver's expected receive PSN.
func (r REQ) StartingPSN() uint32 { return get24(r, reqStartingPSN) }

// LocalCMResponseTimeout returns the exponent of the time within which the
// sender will answer a REP; the receiver's REP retransmission timeout.
func (r REQ) LocalCMResponseTimeout() uint8 { return bits(r, reqByte47, 3, 5) }

// RetryCount returns the transport retry count for the receiver's QP.
func (r REQ) RetryCount() uint8 { return bits(r, reqByte47, 0, 3) }

// PKey returns the partition key.
func (r REQ) PKey() uint16 { return get16(r, reqPKey) }

// PathMTU returns the path MTU code.
func (r REQ) PathMTU() MTU { return MTU(bits(r, reqByte50, 4, 4)) }

// RDCExists returns the RD-channel-exists bit.
func (r REQ) RDCExists() bool { return flag(r, reqByte50, 0x08) }

// RNRRetryCount returns the RNR retry count for the receiver's QP.
func (r REQ) RNRRetryCount() uint8 { return bits(r, reqByte50, 0, 3) }

// MaxCMRetries returns how often the sender will retransmit a CM message;
// the kernel uses it for its own REP retries too.
func (r REQ) MaxCMRetries() uint8 { return bits(r, reqByte51, 4, 4) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REQ) SRQ() bool { return flag(r, reqByte51, 0x08) }

// ExtendedTransportType returns the extended transport type (1: XRC).
func (r REQ) ExtendedTransportType() uint8 { return bits(r, reqByte51, 0, 3) }

// Primary returns the primary path.
func (r REQ) Primary() Path { return Path(r[reqPrimaryPath : reqPrimaryPath+PathSize]) }

// Alternate returns the alternate path; all zero when there is none.
func (r REQ) Alternate() Path { return Path(r[reqAltPath : reqAltPath+PathSize]) }

// SAPSupported returns the Send Address Path bit that ends the alternate path.
func (r REQ) SAPSupported() bool { return flag(r, reqSAPSupported, 0x04) }

// PrivateData returns the 92 bytes of private data; rdma_cm starts them
// with a CMAHeader.
func (r REQ) PrivateData() []byte { return r[reqPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID: r.LocalCommID(), VendorID: r.VendorID(), ServiceID: r.ServiceID(),
		LocalCAGUID: r.LocalCAGUID(), LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(),
		ResponderResources: r.ResponderResources(), LocalEECN: r.LocalEECN(),
		InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), Transport: r.Transport(),
		EndToEndFlowControl: r.EndToEndFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(),
		PKey: r.PKey(), PathMTU: r.PathMTU(), RDCExists: r.RDCExists(),
		RNRRetryCount: r.RNRRetryCount(), MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(),
		ExtendedTransportType: r.ExtendedTransportType(),
		Primary:               r.Primary().Fields(), Alternate: r.Alternate().Fields(),
		SAPSupported: r.SAPSupported(), PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole REQ described by f, reserved bits zero; r must be
// valid. Fields wider than their wire width are masked.
func (r REQ) Encode(f *REQFields) {
	clear(r[:DataSize])
	put32(r, reqLocalCommID, f.LocalCommID)
	put32(r, reqVendorID, f.VendorID&mask24)
	put64(r, reqServiceID, f.ServiceID)
	put64(r, reqLocalCAGUID, f.LocalCAGUID)
	put32(r, reqLocalQKey, f.LocalQKey)
	put24(r, reqLocalQPN, f.LocalQPN)
	r[reqRespRes] = f.ResponderResources
	put24(r, reqLocalEECN, f.LocalEECN)
	r[reqInitDepth] = f.InitiatorDepth
	put24(r, reqRemoteEECN, f.RemoteEECN)
	setBits(r, reqByte43, 3, 5, f.RemoteCMResponseTimeout)
	setBits(r, reqByte43, 1, 2, uint8(f.Transport))
	setFlag(r, reqByte43, 0x01, f.EndToEndFlowControl)
	put24(r, reqStartingPSN, f.StartingPSN)
	setBits(r, reqByte47, 3, 5, f.LocalCMResponseTimeout)
	setBits(r, reqByte47, 0, 3, f.RetryCount)
	put16(r, reqPKey, f.PKey)
	setBits(r, reqByte50, 4, 4, uint8(f.PathMTU))
	setFlag(r, reqByte50, 0x08, f.RDCExists)
	setBits(r, reqByte50, 0, 3, f.RNRRetryCount)
	setBits(r, reqByte51, 4, 4, f.MaxCMRetries)
	setFlag(r, reqByte51, 0x08, f.SRQ)
	setBits(r, reqByte51, 0, 3, f.ExtendedTransportType)
	r.Primary().Encode(&f.Primary)
	r.Alternate().Encode(&f.Alternate)
	setFlag(r, reqSAPSupported, 0x04, f.SAPSupported)
	copy(r.PrivateData(), f.PrivateData)
}

// Path is one of a REQ's two path descriptions.
type Path []byte

// PathFields describes a REQ path. The GIDs are the sender's (local) and the
// receiver's (remote); on RoCEv2 over IPv4 both are IPv4-mapped IPv6
// addresses.
type PathFields struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        [16]byte
	RemoteGID       [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits, enum ib_rate; 0 is "port current"
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits
}

// IsValid reports whether p is long enough for a path.
func (p Path) IsValid() bool { return len(p) >= PathSize }

// LocalLID returns the sender's port LID.
func (p Path) LocalLID() uint16 { return get16(p, pathLocalLID) }

// RemoteLID returns the receiver's port LID.
func (p Path) RemoteLID() uint16 { return get16(p, pathRemoteLID) }

// LocalGID returns the sender's port GID.
func (p Path) LocalGID() [16]byte { return gid(p, pathLocalGID) }

// RemoteGID returns the receiver's port GID.
func (p Path) RemoteGID() [16]byte { return gid(p, pathRemoteGID) }

// FlowLabel returns the 20-bit flow label.
func (p Path) FlowLabel() uint32 { return get32(p, pathFlowWord) >> 12 }

// PacketRate returns the 6-bit static rate code.
func (p Path) PacketRate() uint8 { return p[pathFlowWord+3] & 0x3f }

// TrafficClass returns the traffic class.
func (p Path) TrafficClass() uint8 { return p[pathTClass] }

// HopLimit returns the hop limit.
func (p Path) HopLimit() uint8 { return p[pathHopLimit] }

// SL returns the service level.
func (p Path) SL() uint8 { return bits(p, pathByte42, 4, 4) }

// SubnetLocal reports whether the path stays within one subnet.
func (p Path) SubnetLocal() bool { return flag(p, pathByte42, 0x08) }

// LocalACKTimeout returns the exponent of the transport ACK timeout.
func (p Path) LocalACKTimeout() uint8 { return bits(p, pathByte43, 3, 5) }

// Fields returns the fields of p.
func (p Path) Fields() PathFields {
	return PathFields{
		LocalLID: p.LocalLID(), RemoteLID: p.RemoteLID(), LocalGID: p.LocalGID(),
		RemoteGID: p.RemoteGID(), FlowLabel: p.FlowLabel(), PacketRate: p.PacketRate(),
		TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(), SL: p.SL(),
		SubnetLocal: p.SubnetLocal(), LocalACKTimeout: p.LocalACKTimeout(),
	}
}

// Encode writes the path described by f, keeping the bits of its last byte
// that belong to the REQ (SAP supported).
func (p Path) Encode(f *PathFields) {
	put16(p, pathLocalLID, f.LocalLID)
	put16(p, pathRemoteLID, f.RemoteLID)
	copy(p[pathLocalGID:], f.LocalGID[:])
	copy(p[pathRemoteGID:], f.RemoteGID[:])
	put32(p, pathFlowWord, f.FlowLabel<<12|uint32(f.PacketRate&0x3f))
	p[pathTClass] = f.TrafficClass
	p[pathHopLimit] = f.HopLimit
	p[pathByte42] = f.SL<<4 | b2u(f.SubnetLocal)<<3
	setBits(p, pathByte43, 3, 5, f.LocalACKTimeout)
}
