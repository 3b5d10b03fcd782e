package mad

import "errors"

// Sizes in bytes.
// GSIQKey is the Q_Key of QP1, the General Services Interface where CM
// MADs travel (IBA 13.5.3.2: 0x80010000).
const GSIQKey = 0x80010000

const (
	// Size is the size of a MAD on the wire (IB_MGMT_MAD_SIZE).
	Size = 256
	// HeaderSize is the size of the common MAD header (struct ib_mad_hdr).
	HeaderSize = 24
	// DataSize is the size of the class data after the header, over which
	// the CM message views lie (IB_MGMT_MAD_DATA).
	DataSize = Size - HeaderSize
)

// Header values of CM MADs (cm_format_mad_hdr in drivers/infiniband/core/cm.c).
const (
	BaseVersion    = 1    // IB_MGMT_BASE_VERSION
	ClassCM        = 0x07 // IB_MGMT_CLASS_CM
	CMClassVersion = 2    // IB_CM_CLASS_VERSION, IBA 1.2
	MethodGet      = 0x01 // IB_MGMT_METHOD_GET
	MethodSet      = 0x02 // IB_MGMT_METHOD_SET
	MethodSend     = 0x03 // IB_MGMT_METHOD_SEND: every CM message
	MethodResponse = 0x80 // IB_MGMT_METHOD_RESP bit, set in GetResp and SetResp
)

// AttrID is a MAD attribute ID; for the CM it names the message.
type AttrID uint16

// CM attribute IDs (CM_*_ATTR_ID in include/rdma/ib_cm.h).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001A
)

// attrNames are the CM messages' names, in attribute ID order from REQ.
var attrNames = [...]string{"REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR"}

// String returns the IBTA name of a CM attribute, or its number.
func (a AttrID) String() string {
	if a == AttrClassPortInfo {
		return "ClassPortInfo"
	}
	if a >= AttrREQ && a <= AttrAPR {
		return attrNames[a-AttrREQ]
	}
	return "attr(" + hex16(uint16(a)) + ")"
}

// CMIndex returns the position of a among the CM messages REQ..APR, in
// attribute ID order (the kernel's CM_*_COUNTER), or -1 for other IDs. It
// lets counters be arrays of NumCMAttrs.
func (a AttrID) CMIndex() int {
	if a >= AttrREQ && a <= AttrAPR {
		return int(a - AttrREQ)
	}
	return -1
}

// NumCMAttrs is the number of CM message attributes, REQ through APR.
const NumCMAttrs = int(AttrAPR-AttrREQ) + 1

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

// Errors returned by Parse and CheckCM; each is a sentinel for errors.Is.
var (
	ErrShort        = errors.New("mad: shorter than 256 bytes")
	ErrVersion      = errors.New("mad: base version is not 1")
	ErrClass        = errors.New("mad: management class is not CM")
	ErrClassVersion = errors.New("mad: CM class version is not 2")
	ErrMethod       = errors.New("mad: CM method is not Send")
)

const (
	hdrBaseVersion   = 0
	hdrMgmtClass     = 1
	hdrClassVersion  = 2
	hdrMethod        = 3
	hdrStatus        = 4
	hdrClassSpecific = 6
	hdrTID           = 8
	hdrAttrID        = 16
	hdrReserved      = 18
	hdrAttrMod       = 20
)

// MAD is a management datagram: the common header followed by class data.
type MAD []byte

// Header describes a MAD header for EncodeHeader.
type Header struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Method            uint8
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttrID
	AttributeModifier uint32
}

// CMHeader returns the header the kernel CM puts on every message it sends
// (cm_format_mad_hdr): base version 1, class CM version 2, method Send.
func CMHeader(attr AttrID, tid uint64) Header {
	return Header{
		BaseVersion: BaseVersion, MgmtClass: ClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TransactionID: tid, AttributeID: attr,
	}
}

// Parse checks that b holds a MAD (at least 256 bytes, base version 1) and
// returns a view of its first 256 bytes. Errors are ErrShort and ErrVersion,
// returned as they are so that a flood of bad MADs costs no allocation.
func Parse(b []byte) (MAD, error) {
	if len(b) < Size {
		return nil, ErrShort
	}
	m := MAD(b[:Size:Size])
	if m.BaseVersion() != BaseVersion {
		return nil, ErrVersion
	}
	return m, nil
}

// ParseCM is Parse followed by CheckCM.
func ParseCM(b []byte) (MAD, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if err := m.CheckCM(); err != nil {
		return nil, err
	}
	return m, nil
}

// CheckCM reports whether m is a CM message as the Linux MAD layer would
// deliver it to the CM: class 0x07, class version 2 (the only version
// cm_add_one registers) and method Send. m must be valid.
func (m MAD) CheckCM() error {
	switch {
	case m.MgmtClass() != ClassCM:
		return ErrClass
	case m.ClassVersion() != CMClassVersion:
		return ErrClassVersion
	case m.Method() != MethodSend:
		return ErrMethod
	}
	return nil
}

// IsValid reports whether m is long enough for a MAD.
func (m MAD) IsValid() bool { return len(m) >= Size }

// BaseVersion returns the MAD base version.
func (m MAD) BaseVersion() uint8 { return m[hdrBaseVersion] }

// MgmtClass returns the management class.
func (m MAD) MgmtClass() uint8 { return m[hdrMgmtClass] }

// ClassVersion returns the version of the management class.
func (m MAD) ClassVersion() uint8 { return m[hdrClassVersion] }

// Method returns the method (Get, Set, Send, ... with the response bit).
func (m MAD) Method() uint8 { return m[hdrMethod] }

// Status returns the status field.
func (m MAD) Status() uint16 { return get16(m, hdrStatus) }

// ClassSpecific returns the class-specific header field.
func (m MAD) ClassSpecific() uint16 { return get16(m, hdrClassSpecific) }

// TransactionID returns the transaction ID.
func (m MAD) TransactionID() uint64 { return get64(m, hdrTID) }

// AttributeID returns the attribute ID; for the CM, the message type.
func (m MAD) AttributeID() AttrID { return AttrID(get16(m, hdrAttrID)) }

// AttributeModifier returns the attribute modifier. Linux's CM puts its
// Enhanced Connection Establishment options here (ECE attr_mod).
func (m MAD) AttributeModifier() uint32 { return get32(m, hdrAttrMod) }

// Data returns the 232 bytes of class data, over which the CM views lie.
func (m MAD) Data() []byte { return m[HeaderSize:Size:Size] }

// SetBaseVersion sets the base version.
func (m MAD) SetBaseVersion(v uint8) { m[hdrBaseVersion] = v }

// SetMgmtClass sets the management class.
func (m MAD) SetMgmtClass(v uint8) { m[hdrMgmtClass] = v }

// SetClassVersion sets the class version.
func (m MAD) SetClassVersion(v uint8) { m[hdrClassVersion] = v }

// SetMethod sets the method.
func (m MAD) SetMethod(v uint8) { m[hdrMethod] = v }

// SetStatus sets the status field.
func (m MAD) SetStatus(v uint16) { put16(m, hdrStatus, v) }

// SetClassSpecific sets the class-specific field.
func (m MAD) SetClassSpecific(v uint16) { put16(m, hdrClassSpecific, v) }

// SetTransactionID sets the transaction ID.
func (m MAD) SetTransactionID(v uint64) { put64(m, hdrTID, v) }

// SetAttributeID sets the attribute ID.
func (m MAD) SetAttributeID(v AttrID) { put16(m, hdrAttrID, uint16(v)) }

// SetAttributeModifier sets the attribute modifier.
func (m MAD) SetAttributeModifier(v uint32) { put32(m, hdrAttrMod, v) }

// Header returns the header fields of m.
func (m MAD) Header() Header {
	return Header{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TransactionID: m.TransactionID(), AttributeID: m.AttributeID(),
		AttributeModifier: m.AttributeModifier(),
	}
}

// EncodeHeader writes the 24-byte header described by h, its reserved field
// zero; m must have room for HeaderSize bytes.
func (m MAD) EncodeHeader(h *Header) {
	m[hdrBaseVersion] = h.BaseVersion
	m[hdrMgmtClass] = h.MgmtClass
	m[hdrClassVersion] = h.ClassVersion
	m[hdrMethod] = h.Method
	put16(m, hdrStatus, h.Status)
	put16(m, hdrClassSpecific, h.ClassSpecific)
	put64(m, hdrTID, h.TransactionID)
	put16(m, hdrAttrID, uint16(h.AttributeID))
	put16(m, hdrReserved, 0)
	put32(m, hdrAttrMod, h.AttributeModifier)
}
