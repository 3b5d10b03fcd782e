package mad

import "strconv"

// RejectReason is a REJ reason code (enum ib_cm_rej_reason in
// include/rdma/ib_cm.h; IBTA Table 109). rdma_cm passes it to its users as
// the status of RDMA_CM_EVENT_REJECTED.
type RejectReason uint16

// Reject reasons.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupported               RejectReason = 5
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConn                 RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumerDefined           RejectReason = 28
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
	RejectVendorOptionNotSupported  RejectReason = 35
)

// The strings of ibcm_rej_reason_strs in drivers/infiniband/core/cm.c.
var rejectNames = [...]string{
	RejectNoQP:                      "no QP",
	RejectNoEEC:                     "no EEC",
	RejectNoResources:               "no resources",
	RejectTimeout:                   "timeout",
	RejectUnsupported:               "unsupported",
	RejectInvalidCommID:             "invalid comm ID",
	RejectInvalidCommInstance:       "invalid comm instance",
	RejectInvalidServiceID:          "invalid service ID",
	RejectInvalidTransportType:      "invalid transport type",
	RejectStaleConn:                 "stale conn",
	RejectRDCNotExist:               "RDC not exist",
	RejectInvalidGID:                "invalid GID",
	RejectInvalidLID:                "invalid LID",
	RejectInvalidSL:                 "invalid SL",
	RejectInvalidTrafficClass:       "invalid traffic class",
	RejectInvalidHopLimit:           "invalid hop limit",
	RejectInvalidPacketRate:         "invalid packet rate",
	RejectInvalidAltGID:             "invalid alt GID",
	RejectInvalidAltLID:             "invalid alt LID",
	RejectInvalidAltSL:              "invalid alt SL",
	RejectInvalidAltTrafficClass:    "invalid alt traffic class",
	RejectInvalidAltHopLimit:        "invalid alt hop limit",
	RejectInvalidAltPacketRate:      "invalid alt packet rate",
	RejectPortCMRedirect:            "port CM redirect",
	RejectPortRedirect:              "port redirect",
	RejectInvalidMTU:                "invalid MTU",
	RejectInsufficientRespResources: "insufficient resp resources",
	RejectConsumerDefined:           "consumer defined",
	RejectInvalidRNRRetry:           "invalid RNR retry",
	RejectDuplicateLocalCommID:      "duplicate local comm ID",
	RejectInvalidClassVersion:       "invalid class version",
	RejectInvalidFlowLabel:          "invalid flow label",
	RejectInvalidAltFlowLabel:       "invalid alt flow label",
	RejectVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the kernel's text for r, or "reject reason N".
func (r RejectReason) String() string {
	if int(r) < len(rejectNames) && rejectNames[r] != "" {
		return rejectNames[r]
	}
	return "reject reason " + strconv.Itoa(int(r))
}
