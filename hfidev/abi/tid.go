package abi

// TIDEntry is one u32 of a TID_UPDATE/TID_FREE tidlist: LEN (pages)
// [10:0], CTRL [21:20] (1 for the even entry of a RcvArray pair, 2 for the
// odd one), IDX (the pair) [31:22] ([K] exp_rcv.h EXP_TID_*).
type TIDEntry uint32

// TID entry fields.
const (
	tidLenWidth   = 11
	tidCtrlShift  = 20
	tidIdxShift   = 22
	tidIdxWidth   = 10
	TIDCtrlEven   = 1
	TIDCtrlOdd    = 2
	TIDCtrlBad    = 3 // TID_FREE refuses it with EINVAL
	TIDMaxPages   = 1<<tidLenWidth - 1
	TIDMaxPairIdx = 1<<tidIdxWidth - 1
)

// MakeTIDEntry packs a tidlist entry; each field is truncated to its width.
func MakeTIDEntry(pages uint32, ctrl uint8, pair uint16) TIDEntry {
	return TIDEntry(pages&TIDMaxPages | uint32(ctrl&3)<<tidCtrlShift |
		uint32(pair&TIDMaxPairIdx)<<tidIdxShift)
}

// Pages is LEN [10:0].
func (e TIDEntry) Pages() uint32 { return uint32(e) & TIDMaxPages }

// Ctrl is CTRL [21:20].
func (e TIDEntry) Ctrl() uint8 { return uint8(e >> tidCtrlShift & 3) }

// Pair is IDX [31:22]: the RcvArray pair; the entry is 2×Pair + (Ctrl−1).
func (e TIDEntry) Pair() uint16 { return uint16(e >> tidIdxShift) }
