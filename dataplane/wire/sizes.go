package wire

// Header sizes in bytes.
const (
	EthernetSize     = 14
	VLANSize         = 4
	IPv4MinSize      = 20
	IPv4MaxSize      = 60
	IPv6Size         = 40
	UDPSize          = 8
	BTHSize          = 12
	RETHSize         = 16
	AETHSize         = 4
	AtomicETHSize    = 28
	AtomicAckETHSize = 8
	ImmDtSize        = 4
	IETHSize         = 4
	DETHSize         = 8
	ICRCSize         = 4
)

// Protocol numbers and defaults.
const (
	// UDPPort is the IANA-assigned RoCEv2 destination port.
	UDPPort = 4791
	// DefaultSourcePort is the lowest of the source ports RoCEv2 uses
	// (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN); a Path uses it when given none.
	DefaultSourcePort = 0xc000

	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100

	// ProtocolUDP is the IPv4 protocol and IPv6 next header number of UDP.
	ProtocolUDP = 17

	DefaultPKey = 0xffff
)
