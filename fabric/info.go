package fabric

import (
	"fmt"
	"net/netip"
	"strings"
)

// Caps are an endpoint's capabilities (libfabric's FI_MSG, FI_RMA, ...).
type Caps uint64

// Capabilities. The primary ones (Msg, RMA, Tagged, Atomic) name what an
// endpoint does; the modifiers narrow it (Send without Recv: transmit only).
const (
	CapMsg Caps = 1 << iota
	CapRMA
	CapTagged
	CapAtomic
	CapSend
	CapRecv
	CapRead
	CapWrite
	CapRemoteRead
	CapRemoteWrite
	CapMultiRecv
	CapSource
	CapDirectedRecv
	CapLocalComm
	CapRemoteComm
	CapRMAEvent
	CapTrigger
	CapFence
	CapSharedAV
)

var capNames = []string{"msg", "rma", "tagged", "atomic", "send", "recv", "read", "write", "remote_read",
	"remote_write", "multi_recv", "source", "directed_recv", "local_comm", "remote_comm", "rma_event", "trigger",
	"fence", "shared_av"}

func (c Caps) String() string { return bitNames(uint64(c), capNames) }

func bitNames(v uint64, names []string) string {
	var parts []string
	for i, n := range names {
		if v&(1<<i) != 0 {
			parts = append(parts, n)
			v &^= 1 << i
		}
	}
	if v != 0 {
		parts = append(parts, fmt.Sprintf("%#x", v))
	}
	return strings.Join(parts, "|")
}

// The capabilities each endpoint type offers. Unsupported here, and so
// refused by GetInfo: CapTrigger, CapSharedAV, and CapRMAEvent but on MSG
// endpoints.
const (
	capsMsg   = CapMsg | CapRMA | CapAtomic | CapSend | CapRecv | CapRead | CapWrite | CapRemoteRead | CapRemoteWrite | CapLocalComm | CapRemoteComm | CapFence | CapRMAEvent
	capsDgram = CapMsg | CapSend | CapRecv | CapSource | CapLocalComm | CapRemoteComm
	capsRDM   = capsMsg&^CapRMAEvent | CapTagged | CapMultiRecv | CapSource | CapDirectedRecv
)

// Flags are operation flags (on a post, or as an endpoint's defaults) and
// completion flags (on a Completion), in one space as in libfabric.
type Flags uint64

// Flags.
const (
	// Completion kinds.
	FlagSend Flags = 1 << iota
	FlagRecv
	FlagMsg
	FlagRMA
	FlagTagged
	FlagAtomic
	FlagRead
	FlagWrite
	FlagRemoteRead
	FlagRemoteWrite
	// FlagRemoteCQData: the completion carries the sender's Data.
	FlagRemoteCQData
	// FlagMultiRecv on a completion: the multi-receive buffer is
	// released (no more messages will land in it).
	FlagMultiRecv
	// Operation flags.
	FlagInject
	FlagCompletion
	FlagInjectComplete
	FlagTransmitComplete
	FlagDeliveryComplete
	FlagPeek
	FlagClaim
	FlagDiscard
	FlagMore
	FlagFence
	// FlagSelectiveCompletion, given to Endpoint.Bind with a CQ, reports
	// only the operations posted with FlagCompletion.
	FlagSelectiveCompletion
)

var flagNames = []string{"send", "recv", "msg", "rma", "tagged", "atomic", "read", "write", "remote_read",
	"remote_write", "remote_cq_data", "multi_recv", "inject", "completion", "inject_complete", "transmit_complete",
	"delivery_complete", "peek", "claim", "discard", "more", "fence", "selective_completion"}

func (f Flags) String() string { return bitNames(uint64(f), flagNames) }

// EPType is an endpoint type.
type EPType uint8

// Endpoint types.
const (
	EPUnspec EPType = iota
	// EPMsg is connected and reliable: an RC queue pair.
	EPMsg
	// EPDgram is unconnected and unreliable: a UD queue pair.
	EPDgram
	// EPRDM is unconnected and reliable: RC connections made on first use.
	EPRDM
)

func (t EPType) String() string {
	return [...]string{"unspec", "msg", "dgram", "rdm"}[min(int(t), 3)]
}

// Progress says who drives the transport.
type Progress uint8

// Progress models.
const (
	ProgressUnspec Progress = iota
	// ProgressAuto: the domain's workers (a goroutine per device queue)
	// drive it; reading a CQ only reads.
	ProgressAuto
	// ProgressManual: reading a CQ (or a counter, or Domain.Progress)
	// drives it, run to completion on the caller's goroutine: the
	// lowest latency, and no goroutine of the provider's own.
	ProgressManual
)

func (p Progress) String() string { return [...]string{"unspec", "auto", "manual"}[min(int(p), 2)] }

// Threading is how an application may use a domain's objects from
// several goroutines.
type Threading uint8

// Threading models.
const (
	ThreadUnspec Threading = iota
	// ThreadSafe (the default): every object is safe for concurrent use;
	// posting takes the endpoint's lock, reading takes the CQ's.
	ThreadSafe
	// ThreadDomain: no locks. The application uses a domain's objects
	// from one goroutine at a time; they are not safe for concurrent use.
	ThreadDomain
)

func (t Threading) String() string { return [...]string{"unspec", "safe", "domain"}[min(int(t), 2)] }

// Order is a message ordering guarantee (libfabric's FI_ORDER_*): RAW
// means a read after a write to the same target is not reordered before
// it, and so on.
type Order uint64

// Orderings.
const (
	OrderRAR Order = 1 << iota
	OrderRAW
	OrderRAS
	OrderWAR
	OrderWAW
	OrderWAS
	OrderSAR
	OrderSAW
	OrderSAS
)

// orderAll: one RC queue pair executes everything in order at the target
// (reads and atomics included: its responder is serial).
const orderAll = OrderRAR | OrderRAW | OrderRAS | OrderWAR | OrderWAW | OrderWAS | OrderSAR | OrderSAW | OrderSAS

// MRMode says what memory registration an application must do.
type MRMode uint32

// MR modes.
const (
	// MRLocal: local buffers need a registered region (a Desc) too.
	MRLocal MRMode = 1 << iota
	// MRVirtAddr: RMA addresses are virtual addresses (&buf[i]), not
	// offsets.
	MRVirtAddr
	// MRProvKey: the provider picks keys.
	MRProvKey
	// MRAllocated: only memory from Domain.AllocMemory may be registered.
	MRAllocated
	// MRShared: memory from Domain.AllocMemory is shared with the
	// device's daemon, which can place received payloads straight into it
	// (one copy fewer); other registered memory works too, with a copy
	// more. Reported by domains on a device attached to a daemon; never
	// required (unlike MRAllocated).
	MRShared
)

// DomainAttr describes a domain.
type DomainAttr struct {
	// Name is the device: an interface that `softfabric up` prepared, or
	// "mem:ADDR" for the in-process provider.
	Name      string
	Threading Threading
	Progress  Progress
	MRMode    MRMode
	// MRKeySize is the size of a remote key in bytes; CQDataSize of
	// remote CQ data.
	MRKeySize, CQDataSize int
	// Queues is how many device queues (and workers) the domain serves.
	Queues int
	// CPUs pins the domain's workers: worker i to CPUs[i % len(CPUs)]
	// (automatic progress), or the goroutine that calls PinThread(i)
	// (manual progress). Empty: not pinned.
	CPUs []int
}

// EPAttr describes an endpoint.
type EPAttr struct {
	Type          EPType
	MaxMsgSize    int
	MsgPrefixSize int
	// TagBits is how many bits of a tag are significant.
	TagBits int
	// MaxOrderRAW etc.: the largest RMA whose data ordering is kept.
	MaxOrderRAW, MaxOrderWAR, MaxOrderWAW int
}

// TxAttr describes an endpoint's transmit side.
type TxAttr struct {
	Caps Caps
	// Order is the ordering between messages the endpoint sends.
	Order Order
	// Flags are default operation flags: a completion level
	// (FlagTransmitComplete or FlagDeliveryComplete).
	Flags      Flags
	InjectSize int
	// Size is how many operations may be outstanding.
	Size     int
	IOVLimit int
}

// RxAttr describes an endpoint's receive side.
type RxAttr struct {
	Caps     Caps
	Order    Order
	Size     int
	IOVLimit int
}

// Hints narrow GetInfo. Zero fields match anything.
type Hints struct {
	Caps   Caps
	EPType EPType
	// Provider is "softfabric" (devices prepared with `softfabric up`) or
	// "mem" (in-process; needs Node).
	Provider string
	// Node selects a device by one of its addresses (or, for "mem",
	// names the in-process device's address); Service is the port of a
	// passive endpoint or the well-known number of an unconnected one.
	Node    string
	Service uint16
	Domain  DomainAttr
	TX      TxAttr
	RX      RxAttr
}

// Info is one offer: a device and the attributes an endpoint on it gets.
type Info struct {
	Caps     Caps
	Provider string
	Domain   DomainAttr
	EP       EPAttr
	TX       TxAttr
	RX       RxAttr
	// Src is the local address (the device's), and the service the
	// application asked for.
	Src netip.Addr
	// Service is Hints.Service.
	Service uint16
	// Dst is set on the Info of a connection request (EventConnReq).
	Dst netip.AddrPort

	// req is the pending connection request of a ConnReq event.
	req *connRequest
	// own is the device of an offer from DeviceInfo.
	own *borrowed
}

// Defaults of the offers.
const (
	// DefaultService is the service of a passive or unconnected endpoint
	// when the application gives none (7471, where librdmacm's
	// rdma_server, rdma_client and ucmatose meet; rping's is 7174).
	DefaultService = 7471
	// InjectSize is the most bytes Inject takes (copied at once).
	InjectSize = 64
	// DefaultSize is the default depth of transmit and receive queues.
	DefaultSize = 256
	// MaxIOV is the most buffers one operation gathers or scatters.
	MaxIOV = 4
	// CQDataSize is the size of remote CQ data (an immediate).
	CQDataSize = 4
	// MaxMsgSize is the largest message of a MSG or RDM endpoint; a
	// DGRAM endpoint's is its path MTU.
	MaxMsgSize = 1 << 30
	// RDMEagerSize is the largest RDM message: RDM messages land in
	// provider buffers before they are matched.
	RDMEagerSize = 16 << 10
	// rdmHeader is the room of the RDM protocol header in each message.
	rdmHeader = 64
	// Each transmit slot has an area of its own in the endpoint's
	// registered scratch memory: the RDM header, then inject data (or a
	// native atomic's discarded result).
	slotArea   = 128
	slotInject = 64
)
