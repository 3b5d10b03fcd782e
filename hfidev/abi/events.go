package abi

// Event bits of a context's event word (the EVENTS region: one u64 per
// context and subcontext), [K] include/uapi/rdma/hfi/hfi1_user.h:124-137
// (_HFI1_EVENT_*_BIT). The driver sets them in every user context with
// set_bit (hfi1_set_uevent_bits, file_ops.c); ACK_EVENT clears the bits
// it is given, up to _HFI1_MAX_EVENT_BIT; TID_INVAL_READ clears
// EventTIDMMUNotify (tid.go).
const (
	// EventFrozen: the chip froze (on a link down, among other errors);
	// the context's send context is halted and its receive context
	// disabled until CTXT_RESET (chip.c start_freeze_handling).
	EventFrozen uint64 = 1 << 0
	// EventLinkDown: the port's physical link went down (intr.c
	// handle_linkup_change).
	EventLinkDown uint64 = 1 << 1
	// EventLIDChange: the subnet manager gave the port another LID
	// (mad.c __subn_set_opa_portinfo).
	EventLIDChange uint64 = 1 << 2
	// EventLMCChange: another LMC (same place).
	EventLMCChange uint64 = 1 << 3
	// EventSL2VLChange: another SL→VL map.
	EventSL2VLChange uint64 = 1 << 4

	// EventMaxBit is _HFI1_MAX_EVENT_BIT (= _HFI1_EVENT_TID_MMU_NOTIFY_BIT):
	// ACK_EVENT ignores the bits above it.
	EventMaxBit = 5
	// EventMask is every bit ACK_EVENT can clear.
	EventMask uint64 = 1<<(EventMaxBit+1) - 1
)

// The STATUS region: struct hfi1_status { u64 dev; u64 port; char
// freezemsg[]; } ([K] hfi1_user.h:191-195), one page for the unit, read
// only to user space.
const (
	StatusDevOff       = 0  // dev: device status bits
	StatusPortOff      = 8  // port: the (only) port's status bits
	StatusFreezeMsgOff = 16 // freezemsg: a NUL-terminated message
)

// Status bits ([K] hfi1_user.h:150-158). The driver sets StatusInitted
// and StatusChipPresent in dev and port at init (init.c), and keeps
// StatusIBConf and StatusIBReady in port with the logical link state
// (chip.c update_statusp: both cleared when the port goes DOWN or INIT,
// IBConf set at ARMED, IBReady at ACTIVE).
const (
	StatusInitted     uint64 = 0x1
	StatusChipPresent uint64 = 0x20
	StatusIBReady     uint64 = 0x40 // the link is ACTIVE: usable for data
	StatusIBConf      uint64 = 0x80 // the link is configured (ARMED or ACTIVE)
	StatusHWError     uint64 = 0x200
)

// Status is the STATUS page's two words.
type Status struct {
	Dev, Port uint64
}

// LinkUp reports whether the port is ACTIVE (StatusIBReady).
func (s Status) LinkUp() bool { return s.Port&StatusIBReady != 0 }
