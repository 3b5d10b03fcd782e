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
	h         abi.Header9B // the template's header
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

func newSDMAWalk(info *abi.SDMAReqInfo, h abi.Header9B, dataLen int, tids abi.TIDList) sdmaWalk {
	// The initial TID offset is the template's KDETH.Offset in its OM unit.
	return sdmaWalk{info: info, h: h, dataLen: dataLen, tids: tids, tidOff: h.TIDOffset()}
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
	if lrhBytes(p.n)/4+1 > abi.PBCMaxLengthDWs {
		return p, unix.EINVAL // beyond PBC.LengthDWs: the model's own check
	}
	w.seq++
	w.sent += p.n
	w.tidOff += p.n
	return p, nil
}

// first is the first packet, sent with the template as given after
// check_header_template: its length is the template's LRH length less
// header and ICRC (the data itself if under a dword).
func (w *sdmaWalk) first() (pktPlan, error) {
	n := w.dataLen
	if n >= 4 {
		n = int(w.h.PktLen())*4 - (abi.PktHeaderSize - abi.PBCSize) - abi.ICRCSize
	}
	if err := w.checkLen(n); err != nil {
		return pktPlan{}, err
	}
	if w.info.FragSize%abi.PIOBlockSize != 0 || lrhBytes(n) > lrhBytes(int(w.info.FragSize)) {
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

// lrhBytes is get_lrh_len: header without the PBC, the ICRC, and the
// payload padded to a dword.
func lrhBytes(n int) int { return abi.PktHeaderSize - abi.PBCSize + abi.ICRCSize + (n+3)&^3 }
