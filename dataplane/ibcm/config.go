package ibcm

import (
	"math/rand/v2"
	"time"
)

// Defaults, from rdma_cm (drivers/infiniband/core/cma.c) and rxe.
const (
	// DefaultCMResponseTimeout is CMA_CM_RESPONSE_TIMEOUT: rdma_cm
	// advertises 4.096 µs × 2^20 ≈ 4.3 s in both of a REQ's CM response
	// timeouts.
	DefaultCMResponseTimeout = 20
	// DefaultPacketLifeTime is CMA_IBOE_PACKET_LIFETIME, the packet life
	// time rdma_cm assumes on RoCE (2^18 × 4.096 µs ≈ 1.07 s).
	DefaultPacketLifeTime = 18
	// DefaultMaxCMRetries is CMA_MAX_CM_RETRIES.
	DefaultMaxCMRetries = 15
	// DefaultAckDelay is rxe's local CA ACK delay (RXE_LOCAL_CA_ACK_DELAY),
	// sent as a REP's target ACK delay and folded into a REQ's local ACK
	// timeout.
	DefaultAckDelay = 15
	// DefaultRetryInterval is the wait before our first retransmission of
	// a REQ, REP or DREQ. It doubles with each retry up to
	// Config.MaxRetryInterval.
	DefaultRetryInterval = int64(time.Second)
	// DefaultBacklog is what a backlog of 0 or less means: ucma's
	// max_backlog default.
	DefaultBacklog = 1024
	// MRADelay, or-ed into SendMRA's service timeout, records the MRA
	// without sending it: it goes out only in answer to a duplicate, as
	// rdma_cm does with CMA_CM_MRA_SETTING (IB_CM_MRA_FLAG_DELAY | 24).
	MRADelay = 0x80
)

// Config configures an Agent. Zero values select the defaults.
type Config struct {
	// LocalGUID is this CA's node GUID, sent in REQs and REPs; with the
	// remote comm ID it is how peers tell duplicates from new requests.
	LocalGUID uint64
	// LocalGID is the GID used as a REQ's primary local GID when
	// ConnectParams.LocalGID is zero.
	LocalGID [16]byte

	// Send transmits a 256-byte MAD to a peer's GSI. The buffer belongs to
	// the agent: copy it before returning. Send must not call the Agent.
	Send func(to Peer, mad []byte)
	// Event reports connection events; it may call the Agent. Slices in
	// the event alias the received MAD and are valid only during the call.
	Event func(Event)
	// Rand supplies comm IDs and transaction IDs; nil uses math/rand/v2's
	// runtime-seeded generator. Tests pass a seeded source.
	Rand rand.Source

	// CMResponseTimeout is the 5-bit exponent (4.096 µs × 2^x) we
	// advertise in REQs as both the local and the remote CM response
	// timeout: how fast we promise to answer, and how long the peer may
	// take. The peer times its REP retransmissions by it. Default 20.
	CMResponseTimeout uint8
	// PacketLifeTime is the path's packet life time exponent, from which
	// the REQ's local ACK timeout and the default waits derive. Default 18.
	PacketLifeTime uint8
	// MaxCMRetries is how often a REQ, REP or DREQ is retransmitted
	// before giving up (the REQ carries it to the peer, which uses it for
	// its REP). For connections we accept, the REQ's value is used, as
	// the kernel does. 4 bits; default 15.
	MaxCMRetries uint8
	// AckDelay is our CA's ACK delay exponent. Default 15.
	AckDelay uint8

	// RetryInterval is the wait before the first retransmission; each
	// further wait doubles, up to MaxRetryInterval. Shorter than the
	// kernel's fixed wait so that a lost MAD costs a second, not six.
	// Default 1 s.
	RetryInterval int64
	// MaxRetryInterval caps the retransmission wait. Default: what the
	// kernel waits between REQ retransmissions with our timeouts,
	// 2 × PacketLifeTime + CMResponseTimeout in cm_convert_to_ms terms
	// (6.144 s with the defaults). On connections we accept, the REQ's
	// local CM response timeout lowers the cap further, as the kernel
	// times its REPs by it (4.096 s from rdma_cm). An MRA replaces the
	// wait with its service timeout plus the packet life time, as
	// cm_mra_handler does.
	MaxRetryInterval int64
	// MaxMRAWait caps the wait a peer's MRA can ask for before our next
	// retransmission, and the per-try wait assumed of a peer when
	// deriving ActionTimeout, so that no peer can pin state for hours.
	// Default: what rdma_cm's MRA asks for (service timeout 24 plus the
	// packet life time, about 67.5 s).
	MaxMRAWait int64
	// TimeWait is how long an ID stays in TimeWait after a disconnect or
	// a late REJ. Default: cm_convert_to_ms(PacketLifeTime + 1), the
	// kernel's wait (2.048 s with the defaults).
	TimeWait int64
	// ActionTimeout bounds the states that wait on the local caller
	// (a request not yet accepted, a reply not yet answered with RTU).
	// On expiry the ID is rejected and freed with EventTimeout. Default:
	// as long as the peer keeps retransmitting, from the timeouts and
	// retry count it advertised (and any MRA we sent).
	ActionTimeout int64
	// SIDRHold is how long an answered SIDR request is remembered, its
	// SIDR_REP resent to duplicates. Default: two of rdma_cm's SIDR
	// retransmission intervals (8.192 s).
	SIDRHold int64
	// MaxSIDRHeld bounds the answered SIDR requests remembered; beyond it
	// they are forgotten once answered, as the kernel does. Default 4096.
	MaxSIDRHeld int
	// RejectOnBacklog answers REQs beyond a listener's backlog with REJ
	// "no resources" (3). By default they are dropped without a word, as
	// ucma does (its event handler returns -ENOMEM and cm_destroy_id then
	// skips the REJ "to allow future retries"): the peer's retransmission
	// may find room.
	RejectOnBacklog bool
}

type globalSource struct{}

func (globalSource) Uint64() uint64 { return rand.Uint64() }

// kernelMs is cm_convert_to_ms: the kernel's millisecond rounding of
// 4.096 µs × 2^exp, as nanoseconds.
func kernelMs(exp uint8) int64 {
	e := int(exp&31) - 8
	if e < 0 {
		e = 0
	}
	return int64(time.Millisecond) << e
}

// ackTimeout is cm_ack_timeout: the local ACK timeout exponent for a path,
// 4.096 µs × 2^t ≈ CA ACK delay + 2 × packet life time.
func ackTimeout(caAckDelay, packetLifeTime uint8) uint8 {
	t := int(packetLifeTime) + 1
	d := int(caAckDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(packetLifeTime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

func (c *Config) setDefaults() {
	if c.Rand == nil {
		c.Rand = globalSource{}
	}
	if c.CMResponseTimeout == 0 {
		c.CMResponseTimeout = DefaultCMResponseTimeout
	}
	c.CMResponseTimeout &= 31
	if c.PacketLifeTime == 0 {
		c.PacketLifeTime = DefaultPacketLifeTime
	}
	c.PacketLifeTime = min(c.PacketLifeTime, 30)
	if c.MaxCMRetries == 0 {
		c.MaxCMRetries = DefaultMaxCMRetries
	}
	c.MaxCMRetries &= 15
	if c.AckDelay == 0 {
		c.AckDelay = DefaultAckDelay
	}
	c.AckDelay &= 31
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.MaxRetryInterval <= 0 {
		c.MaxRetryInterval = 2*kernelMs(c.PacketLifeTime) + kernelMs(c.CMResponseTimeout)
	}
	c.MaxRetryInterval = max(c.MaxRetryInterval, c.RetryInterval)
	if c.MaxMRAWait <= 0 {
		c.MaxMRAWait = mraWait(24, c.PacketLifeTime)
	}
	if c.SIDRHold <= 0 {
		c.SIDRHold = 2 * kernelMs(DefaultCMResponseTimeout)
	}
	if c.MaxSIDRHeld <= 0 {
		c.MaxSIDRHeld = 4096
	}
	if c.TimeWait <= 0 {
		c.TimeWait = kernelMs(c.PacketLifeTime + 1)
	}
}
