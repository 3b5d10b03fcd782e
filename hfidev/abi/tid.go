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

// Expected-receive geometry ([K] exp_rcv.h, user_exp_rcv.c, user_sdma.h).
const (
	// TIDGroupSize is dd->rcv_entries.group_size: RcvArray entries are
	// handed out in groups of eight.
	TIDGroupSize = 8
	// TIDMaxBuffer is MAX_EXPECTED_BUFFER: the most one RcvArray entry
	// maps; TID_UPDATE splits runs into power-of-two chunks up to it.
	TIDMaxBuffer = 2 << 20
	// KDETHOMSmall and KDETHOMLarge are the units of KDETH.Offset without
	// and with KDETH.OM; KDETHOMMaxSize is the TID length from which the
	// driver uses the large unit (KDETH_OM_MAX_SIZE: 15 offset bits of 4
	// bytes).
	KDETHOMSmall   = 4
	KDETHOMLarge   = 64
	KDETHOMMaxSize = 1 << (15 + 2)
)

// EventTIDMMUNotify is HFI1_EVENT_TID_MMU_NOTIFY: set in the context's
// event word when a programmed buffer is invalidated (the MMU notifier);
// TID_INVAL_READ clears it.
const EventTIDMMUNotify uint64 = 1 << 5

// TIDEntryFor is the tidlist entry of RcvArray entry rcventry (relative to
// the context's expected base) mapping pages pages: rcventry2tidinfo |
// LEN.
func TIDEntryFor(rcventry int, pages uint32) TIDEntry {
	return MakeTIDEntry(pages, uint8(1<<(rcventry&1)), uint16(rcventry>>1))
}

// RcvEntry is the RcvArray entry (relative to the expected base) the
// entry names: 2×IDX + CTRL−1; false for CTRL 0 or 3, which name none.
func (e TIDEntry) RcvEntry() (int, bool) {
	c := e.Ctrl()
	if c != TIDCtrlEven && c != TIDCtrlOdd {
		return 0, false
	}
	return int(e.Pair())*2 + int(c) - 1, true
}

// Bytes is the length the entry maps: LEN pages.
func (e TIDEntry) Bytes() int { return int(e.Pages()) * PageSize }

// OMUnit is the KDETH.Offset unit a packet into this entry uses: 64 bytes
// when the entry maps KDETHOMMaxSize or more, else 4 (user_sdma.c).
func (e TIDEntry) OMUnit() int {
	if e.Bytes() >= KDETHOMMaxSize {
		return KDETHOMLarge
	}
	return KDETHOMSmall
}

// TIDList is a view of a tidlist as it travels in an EXPECTED SDMA
// request's last iovec: little-endian u32 entries.
type TIDList []byte

// Len is the number of whole entries.
func (l TIDList) Len() int { return len(l) / 4 }

// At is entry i; i must be below Len.
func (l TIDList) At(i int) TIDEntry { return TIDEntry(le.Uint32(l[4*i:])) }

// Set stores entry i; i must be below Len.
func (l TIDList) Set(i int, e TIDEntry) { le.PutUint32(l[4*i:], uint32(e)) }
