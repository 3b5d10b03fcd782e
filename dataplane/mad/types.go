package mad

import "time"

// Transport is the REQ's 2-bit Transport Service Type.
type Transport uint8

// Transport service types (IBTA Table 106). rdma_cm uses RC, and UC for
// RDMA_PS_IPOIB-less UC QPs; XRC also needs ExtendedTransportType 1
// (cm_req_set_qp_type).
const (
	TransportRC  Transport = 0
	TransportUC  Transport = 1
	TransportRD  Transport = 2
	TransportXRC Transport = 3
)

// String returns the IBTA abbreviation of t.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportXRC:
		return "XRC"
	}
	return "transport(?)"
}

// MTU is an IBTA path MTU code (enum ib_mtu), as carried in the REQ's 4-bit
// Path Packet Payload MTU.
type MTU uint8

// Path MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the payload size m stands for, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// roceOverhead is what iboe_get_mtu (include/rdma/ib_addr.h) takes off an
// Ethernet MTU before picking an IB MTU: GRH 40 + UDP 8 + BTH 12 + XRC ETH 4
// + AtomicETH 28 + ICRC 4.
const roceOverhead = 40 + 8 + 12 + 4 + 28 + 4

// MTUForEthernet returns the path MTU a RoCE device picks for a netdev MTU
// (iboe_get_mtu): 1024 for the usual 1500, 4096 for 9000; 0 if too small.
func MTUForEthernet(netdevMTU int) MTU {
	n := netdevMTU - roceOverhead
	for m := MTU4096; m >= MTU256; m-- {
		if n >= m.Bytes() {
			return m
		}
	}
	return 0
}

// Msg names the message a REJ rejects or an MRA acknowledges (enum
// cm_msg_response in cm_msgs.h); it is a 2-bit field.
type Msg uint8

// Messages a REJ or MRA can refer to.
const (
	MsgREQ   Msg = 0
	MsgREP   Msg = 1
	MsgOther Msg = 2 // LAP for an MRA; anything after REP for a REJ
)

// Timeout returns the time an IBTA 5-bit timeout exponent stands for:
// 4.096 µs × 2^exp (CM response timeouts, service timeouts, packet life
// time, local ACK timeout). Bits above the low five are ignored. The kernel
// rounds the same value to whole milliseconds (cm_convert_to_ms).
func Timeout(exp uint8) time.Duration {
	return time.Duration(4096) << (exp & 31)
}
