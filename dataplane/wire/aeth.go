package wire

import "time"

// AckKind is the type of an AETH syndrome, in its bits 6:5.
type AckKind uint8

// Syndrome kinds.
const (
	AckKindACK      AckKind = 0
	AckKindRNR      AckKind = 1
	AckKindReserved AckKind = 2
	AckKindNAK      AckKind = 3
)

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

// NAK codes carried in the low five bits of a NAK syndrome.
const (
	NAKPSNSeqErr        NAKCode = 0
	NAKInvalidRequest   NAKCode = 1
	NAKRemoteAccessErr  NAKCode = 2
	NAKRemoteOpErr      NAKCode = 3
	NAKInvalidRDRequest NAKCode = 4
)

// CreditsInvalid is the credit count code that means "no credit
// information": what Linux rxe and most RoCE NICs send, as they do not do
// end-to-end flow control.
const CreditsInvalid = 0x1f

const (
	syndromeValue = 0x1f
	syndromeShift = 5
)

// SyndromeKind returns the kind of syndrome s.
func SyndromeKind(s uint8) AckKind { return AckKind(s>>syndromeShift) & 3 }

// SyndromeValue returns the low five bits of s: a credit count code, an RNR
// timer code or a NAK code.
func SyndromeValue(s uint8) uint8 { return s & syndromeValue }

// AckSyndrome returns the syndrome of an ACK carrying credit count code c.
func AckSyndrome(creditCode uint8) uint8 {
	return uint8(AckKindACK)<<syndromeShift | creditCode&syndromeValue
}

// RNRSyndrome returns the syndrome of an RNR NAK asking the requester to
// wait for RNR timer code timerCode.
func RNRSyndrome(timerCode uint8) uint8 {
	return uint8(AckKindRNR)<<syndromeShift | timerCode&syndromeValue
}

// NAKSyndrome returns the syndrome of a NAK with code c.
func NAKSyndrome(code NAKCode) uint8 {
	return uint8(AckKindNAK)<<syndromeShift | uint8(code)&syndromeValue
}

// rnrTimerUsec is the IBTA RNR NAK timer encoding in microseconds; code 0
// is the longest wait.
// rxe's copy has 61410 for code 25; the specification says 61.44 ms.
var rnrTimerUsec = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimer returns how long a requester waits after an RNR NAK with timer
// code code; only its low five bits are used.
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimerUsec[code&syndromeValue]) * time.Microsecond
}
