package abi

// User software version of the hfi1 cdev ABI (hfi1_user.h). A major
// mismatch makes ASSIGN_CTXT fail with ENODEV; minors are compatible.
const (
	SWMajor      = 6
	SWMinor      = 3
	SWMajorShift = 16
	// UserVersion is (SWMAJOR<<16)|SWMINOR, what GET_VERS returns and what
	// ASSIGN_CTXT expects in hfi1_user_info.userversion.
	UserVersion = SWMajor<<SWMajorShift | SWMinor
)

// Runtime capability bits (HFI1_CAP_*, hfi1_user.h) as found in
// hfi1_ctxt_info.runtime_flags. Only those this package acts on are named.
const (
	CapDMARtail      uint64 = 1 << 0  // RcvHdrTail is DMA'd to the RTAIL page
	CapSDMA          uint64 = 1 << 1  // user SDMA (writev) is available
	CapSDMAAHG       uint64 = 1 << 2  // SDMA header generation (AHG) for multi-packet requests
	CapExtendedPSN   uint64 = 1 << 3  // 31-bit PSNs: SDMA's per-packet PSN wraps at 2^31, not 2^24
	CapMultiPktEgr   uint64 = 1 << 7  // several packets per eager buffer
	CapNoDropRHQFull uint64 = 1 << 8  // stall instead of drop on RcvHdrQ full
	CapNoDropEgrFull uint64 = 1 << 9  // stall instead of drop on eager full
	CapTIDUnmap      uint64 = 1 << 10 // no TID caching: no MMU notifier, TID_INVAL_READ refused
)

// MaxSharedCtxts is HFI1_MAX_SHARED_CTXTS: the most subcontexts a context
// may be shared by, and the stride of the events array per context.
const MaxSharedCtxts = 8

// KDETHQPPrefix is the value of BTH.QP[23:16] that marks a KDETH (PSM/OPX)
// packet, returned as hfi1_base_info.bthqp.
const KDETHQPPrefix = 0x80

// Chip is a generation of HFI silicon.
type Chip uint8

// The chips the spec covers. Values are the chip-major field of hw_version.
const (
	ChipWFR Chip = 7 // Omni-Path 100 (Wolf River)
	ChipJKR Chip = 8 // CN5000 (Jackson Ridge)
	ChipCYR Chip = 9 // (Cyan Ridge), recognised only
)

func (c Chip) String() string {
	switch c {
	case ChipWFR:
		return "WFR"
	case ChipJKR:
		return "JKR"
	case ChipCYR:
		return "CYR"
	}
	return "chip(unknown)"
}

// HWVersion is hfi1_base_info.hw_version ([O] opa_user.h).
type HWVersion uint32

// MakeHWVersion builds a hw_version word.
func MakeHWVersion(c Chip, swInterface, minor uint8) HWVersion {
	return HWVersion(uint32(swInterface)<<24 | uint32(c)<<8 | uint32(minor))
}

// Chip is the chip-major field [15:8].
func (v HWVersion) Chip() Chip { return Chip(v >> 8) }

// SWInterface is [31:24]: 3 on WFR, 4 on JKR.
func (v HWVersion) SWInterface() uint8 { return uint8(v >> 24) }

// Minor is the chip minor revision [7:0].
func (v HWVersion) Minor() uint8 { return uint8(v) }
