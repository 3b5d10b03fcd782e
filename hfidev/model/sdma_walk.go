package model

import (
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// sdmaWalk steps through a request's packets as user_sdma_send_pkts does:
// each packet's payload length (compute_data_length) and, for EXPECTED,
// the tidlist entry and the offset in it that its KDETH gets
// (set_txreq_header), with the driver's checks on the way.
//
// The driver builds and submits packets in batches of eight
// (initial_pkt_count), so there a request failing late may already have
// sent its first batches; the model walks the whole request once before
// sending any of it, and sends nothing of a failing request.
type sdmaWalk struct {
	info      *abi.SDMAReqInfo
	h         abi.BTHKDETH // the template's BTH and KDETH
	tmplData  int          // the first packet's data by the template's LRH
	is16B     bool         // 16B packets: lengths in flits, data in whole quadwords, a tail quadword
	dataLen   int
	seq, sent int
	tids      abi.TIDList // nil for EAGER
	tidIdx    int
	tidOff    int // bytes of tids[tidIdx] used so far
}

// pktPlan is one packet: n payload bytes, and for EXPECTED the entry and
// offset its KDETH names.
type pktPlan struct {
	n      int
	tid    abi.TIDEntry
	tidOff int
}

func newSDMAWalk(info *abi.SDMAReqInfo, h abi.BTHKDETH, tmplData int, is16B bool, dataLen int, tids abi.TIDList) sdmaWalk {
	// The initial TID offset is the template's KDETH.Offset in its OM unit.
	return sdmaWalk{info: info, h: h, tmplData: tmplData, is16B: is16B, dataLen: dataLen, tids: tids, tidOff: h.TIDOffset()}
}

// next plans the next packet and advances past it.
func (w *sdmaWalk) next() (pktPlan, error) {
	var p pktPlan
	var err error
	if w.seq == 0 {
		p, err = w.first()
	} else {
		p, err = w.later()
	}
	if err != nil {
		return p, err
	}
	if w.is16B && p.n%abi.FlitSize != 0 {
		// [C] hfi2 user_sdma.c: "provider must give QWORD aligned data
		// for 16B".
		return p, unix.EINVAL
	}
	if w.pbcDWs(p.n) > abi.PBCMaxLengthDWs {
		return p, unix.EINVAL // beyond PBC.LengthDWs: the model's own check
	}
	w.seq++
	w.sent += p.n
	w.tidOff += p.n
	return p, nil
}

// first is the first packet, sent with the template as given after
// check_header_template: its length is the template's LRH length less
// header and ICRC or tail (9B: the data itself if under a dword).
func (w *sdmaWalk) first() (pktPlan, error) {
	n := w.dataLen
	if n >= 4 || w.is16B {
		n = w.tmplData
	}
	if err := w.checkLen(n); err != nil {
		return pktPlan{}, err
	}
	if w.info.FragSize%abi.PIOBlockSize != 0 || w.lrhBytes(n) > w.lrhBytes(int(w.info.FragSize)) {
		return pktPlan{}, unix.EINVAL
	}
	p := pktPlan{n: n}
	if w.tids != nil {
		// The header must name the first tidlist entry and the data fit
		// in it from the template's offset.
		p.tid, p.tidOff = w.tids.At(0), w.tidOff
		if w.tidOff+n > p.tid.Bytes() || w.h.TIDCtrl() != p.tid.Ctrl() || w.h.TID() != p.tid.Pair() {
			return pktPlan{}, unix.EINVAL
		}
	}
	return p, nil
}

// later is every packet after the first: fragsize or what remains, and
// for EXPECTED no more than what is left of the current TID, moving to
// the next entry when it is full (a zero entry ends the list).
func (w *sdmaWalk) later() (pktPlan, error) {
	left := w.dataLen - w.sent
	if w.tids == nil {
		n := min(left, int(w.info.FragSize))
		return pktPlan{n: n}, w.checkLen(n)
	}
	tid := w.tids.At(w.tidIdx)
	n := min(tid.Bytes()-w.tidOff, int(w.info.FragSize))
	if n == 0 && w.tidIdx+1 < w.tids.Len() && w.tids.At(w.tidIdx+1) != 0 {
		w.tidIdx++
		w.tidOff = 0
		tid = w.tids.At(w.tidIdx)
		n = min(tid.Bytes(), int(w.info.FragSize))
	}
	n = min(n, left)
	if err := w.checkLen(n); err != nil {
		return pktPlan{}, err
	}
	if w.tidOff == tid.Bytes() {
		// set_txreq_header: at the end of this TID with no next one.
		return pktPlan{}, unix.EINVAL
	}
	return pktPlan{n: n, tid: tid, tidOff: w.tidOff}, nil
}

// checkLen refuses a packet of n bytes: a template shorter than its header
// (the driver's u32 wraps and check_header_template refuses it), "request
// has data but pkt len is 0", or a template longer than the data (the
// model's choice: the engine could not read it).
func (w *sdmaWalk) checkLen(n int) error {
	switch {
	case n < 0:
		return unix.EINVAL
	case (w.dataLen > 0 && n == 0) || n > w.dataLen-w.sent:
		return unix.EFAULT
	}
	return nil
}

// lrhBytes is get_lrh_len: header without the PBC, the payload padded
// (pad_len: to a dword for 9B, a quadword for 16B), and the ICRC dword
// (9B) or the tail quadword (16B).
func (w *sdmaWalk) lrhBytes(n int) int {
	if w.is16B {
		return abi.Header16BSize + (n+7)&^7 + abi.Tail16BSize
	}
	return abi.PktHeaderSize - abi.PBCSize + abi.ICRCSize + (n+3)&^3
}

// pbcDWs is lrh2pbc: PBC.LengthDWs of a packet of n data bytes. The 9B
// LRH length counts the ICRC, which the PBC's does not: its dword stands
// in for the PBC's second; the 16B lengths both count the tail quadword.
func (w *sdmaWalk) pbcDWs(n int) int {
	if w.is16B {
		return w.lrhBytes(n)/4 + abi.PBCSize/4
	}
	return w.lrhBytes(n)/4 + 1
}
