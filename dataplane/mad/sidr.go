package mad

// SIDR_REQ and SIDR_REP byte offsets (IBTA Tables 119 and 120).
const (
	sidrReqRequestID   = 0
	sidrReqPKey        = 4
	sidrReqServiceID   = 8
	sidrReqPrivateData = 16

	sidrRepRequestID   = 0
	sidrRepStatus      = 4
	sidrRepInfoLength  = 5
	sidrRepVendorIDHi  = 6  // ECE vendor ID bits 23:8 (IBTA reserved)
	sidrRepQPN         = 8  // QPN:24, ECE vendor ID bits 7:0
	sidrRepServiceID   = 12 // unaligned
	sidrRepQKey        = 20
	sidrRepInfo        = 24
	sidrRepPrivateData = 96

	// SIDRREQPrivateDataSize is IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE.
	SIDRREQPrivateDataSize = DataSize - sidrReqPrivateData // 216
	// SIDRREPInfoSize is IB_CM_SIDR_REP_INFO_LENGTH.
	SIDRREPInfoSize = sidrRepPrivateData - sidrRepInfo // 72
	// SIDRREPPrivateDataSize is IB_CM_SIDR_REP_PRIVATE_DATA_SIZE.
	SIDRREPPrivateDataSize = DataSize - sidrRepPrivateData // 136
)

// SIDRStatus is a SIDR_REP status (enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // no such service: what the kernel answers without a listener
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

// SIDRREQ is a service ID resolution request (IBTA Table 119), with which
// rdma_cm sets up UD (RDMA_PS_UDP) "connections".
type SIDRREQ []byte

// SIDRREQFields describes a SIDR_REQ for Encode.
type SIDRREQFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // at most SIDRREQPrivateDataSize bytes; rdma_cm starts it with a CMAHeader
}

// IsValid reports whether r is long enough for a SIDR_REQ.
func (r SIDRREQ) IsValid() bool { return len(r) >= DataSize }

// RequestID returns the requester's ID for this request.
func (r SIDRREQ) RequestID() uint32 { return get32(r, sidrReqRequestID) }

// PKey returns the partition key.
func (r SIDRREQ) PKey() uint16 { return get16(r, sidrReqPKey) }

// ServiceID returns the service ID being resolved.
func (r SIDRREQ) ServiceID() uint64 { return get64(r, sidrReqServiceID) }

// PrivateData returns the 216 bytes of private data.
func (r SIDRREQ) PrivateData() []byte { return r[sidrReqPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. PrivateData aliases r.
func (r SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{RequestID: r.RequestID(), PKey: r.PKey(), ServiceID: r.ServiceID(), PrivateData: r.PrivateData()}
}

// Encode writes the whole SIDR_REQ described by f.
func (r SIDRREQ) Encode(f *SIDRREQFields) {
	clear(r[:DataSize])
	put32(r, sidrReqRequestID, f.RequestID)
	put16(r, sidrReqPKey, f.PKey)
	put64(r, sidrReqServiceID, f.ServiceID)
	copy(r.PrivateData(), f.PrivateData)
}

// SIDRREP is a service ID resolution reply (IBTA Table 120).
type SIDRREP []byte

// SIDRREPFields describes a SIDR_REP for Encode.
type SIDRREPFields struct {
	RequestID   uint32
	Status      SIDRStatus
	VendorID    uint32 // 24 bits, ECE
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        []byte // additional information, at most SIDRREPInfoSize bytes
	PrivateData []byte // at most SIDRREPPrivateDataSize bytes
}

// IsValid reports whether r is long enough for a SIDR_REP.
func (r SIDRREP) IsValid() bool { return len(r) >= DataSize }

// RequestID returns the ID of the request being answered.
func (r SIDRREP) RequestID() uint32 { return get32(r, sidrRepRequestID) }

// Status returns the status.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[sidrRepStatus]) }

// InfoLength returns the length of the additional information as sent; it
// may exceed SIDRREPInfoSize in a malformed SIDR_REP.
func (r SIDRREP) InfoLength() uint8 { return r[sidrRepInfoLength] }

// VendorID returns the 24-bit ECE vendor ID (CM_SIDR_REP_VENDOR_ID_H/L).
func (r SIDRREP) VendorID() uint32 {
	return uint32(get16(r, sidrRepVendorIDHi))<<8 | uint32(r[sidrRepQPN+3])
}

// QPN returns the UD QP number serving the service.
func (r SIDRREP) QPN() uint32 { return get24(r, sidrRepQPN) }

// ServiceID returns the resolved service ID.
func (r SIDRREP) ServiceID() uint64 { return get64(r, sidrRepServiceID) }

// QKey returns the Q_Key of the UD QP.
func (r SIDRREP) QKey() uint32 { return get32(r, sidrRepQKey) }

// Info returns the additional information, cut to InfoLength.
func (r SIDRREP) Info() []byte {
	return r[sidrRepInfo : sidrRepInfo+min(int(r.InfoLength()), SIDRREPInfoSize) : sidrRepPrivateData]
}

// PrivateData returns the 136 bytes of private data.
func (r SIDRREP) PrivateData() []byte { return r[sidrRepPrivateData:DataSize:DataSize] }

// Fields returns the fields of r. Info and PrivateData alias r.
func (r SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{
		RequestID: r.RequestID(), Status: r.Status(), VendorID: r.VendorID(), QPN: r.QPN(),
		ServiceID: r.ServiceID(), QKey: r.QKey(), Info: r.Info(), PrivateData: r.PrivateData(),
	}
}

// Encode writes the whole SIDR_REP described by f, with InfoLength set to
// the length of f.Info (cut to SIDRREPInfoSize).
func (r SIDRREP) Encode(f *SIDRREPFields) {
	clear(r[:DataSize])
	put32(r, sidrRepRequestID, f.RequestID)
	r[sidrRepStatus] = uint8(f.Status)
	put16(r, sidrRepVendorIDHi, uint16(f.VendorID>>8))
	put32(r, sidrRepQPN, f.QPN<<8|f.VendorID&0xff)
	put64(r, sidrRepServiceID, f.ServiceID)
	put32(r, sidrRepQKey, f.QKey)
	r[sidrRepInfoLength] = uint8(copy(r[sidrRepInfo:sidrRepPrivateData], f.Info))
	copy(r.PrivateData(), f.PrivateData)
}
