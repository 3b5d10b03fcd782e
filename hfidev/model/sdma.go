package model

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// sdmaQueue is one context's user SDMA state, as the driver keeps it per
// file ([K] user_sdma.c: hfi1_user_sdma_pkt_q and _comp_q): the
// completion ring, which slots hold a request (req_in_use), how many
// requests are in flight (n_reqs), and, while completions are held, the
// slots whose last packet has left but whose completion is not written.
type sdmaQueue struct {
	mu    sync.Mutex
	comp  []byte // the SDMA_COMP region: {u32 status, u32 errcode} per slot
	ring  int
	inUse []bool
	nReqs int
	held  []uint16
	tmpl  [abi.PktHeader16BSize]byte // 9B templates use the first PktHeaderSize bytes
	pkt   []byte                     // the packet being built: PBC, header, payload
}

func newSDMAQueue(comp []byte, ring int) *sdmaQueue {
	return &sdmaQueue{
		comp: comp, ring: ring, inUse: make([]bool, ring),
		pkt: make([]byte, abi.PBCMaxLengthDWs*4),
	}
}

// Writev implements sys.Sys: user SDMA, as hfi1_write_iter and
// hfi1_user_sdma_process_request do it. Each request is iov[0] =
// sdma_req_info + the 64-byte header template, then its data iovecs (and,
// for EXPECTED, a tidlist). It returns how many requests it accepted; if
// any request fails, the error alone, as the driver does (requests before
// it stay accepted). Accepted requests are sent at once, packet by
// packet, to the unit's egress; their completion is written right away
// unless HoldSDMACompletions is on.
func (u *Unit) Writev(fd int, iov [][]byte) (int, error) {
	u.mu.Lock()
	f, ok := u.files[fd]
	var c *context
	if ok {
		c = f.ctxt
	}
	u.mu.Unlock()
	switch {
	case !ok:
		return -1, unix.EBADF
	case u.cfg.Caps&abi.CapSDMA == 0:
		return -1, unix.EINVAL
	case c == nil:
		return -1, unix.EIO
	case len(iov) == 0:
		return -1, unix.EINVAL
	}
	q := c.sdma
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.nReqs >= q.ring {
		return -1, unix.ENOSPC
	}
	reqs := 0
	for len(iov) > 0 {
		n, err := u.process(c, q, iov)
		if err != nil {
			return -1, err
		}
		iov = iov[n:]
		reqs++
	}
	return reqs, nil
}

// process takes one request off the front of iov and returns how many
// iovecs it used. The checks before the slot is claimed fail without
// touching the ring; those after it write ERROR with the errno to the
// slot and free it (free_req), except ErrNotModeled, which only frees it.
func (u *Unit) process(c *context, q *sdmaQueue, iov [][]byte) (int, error) {
	if len(iov[0]) < abi.SDMAReqInfoSize+abi.PktHeaderSize {
		return 0, unix.EINVAL
	}
	var info abi.SDMAReqInfo
	info.Unmarshal(iov[0])
	cnt := int(info.IovCnt())
	switch {
	case int(info.CompIdx) >= q.ring:
		return 0, unix.EINVAL
	case cnt < 1 || cnt > len(iov):
		return 0, unix.EINVAL
	case info.FragSize == 0:
		return 0, unix.EINVAL
	case q.inUse[info.CompIdx]:
		return 0, unix.EBADSLT
	}
	q.inUse[info.CompIdx] = true
	q.nReqs++
	err := u.send(c, q, &info, iov[:cnt])
	switch {
	case err == nil:
		if u.sdmaHold.Load() {
			q.held = append(q.held, info.CompIdx)
		} else {
			q.complete(info.CompIdx, abi.SDMAComplete, 0)
		}
		return cnt, nil
	case isErrno(err):
		q.complete(info.CompIdx, abi.SDMAError, err.(unix.Errno))
	default:
		q.free(info.CompIdx)
	}
	return 0, err
}

func isErrno(err error) bool {
	_, ok := err.(unix.Errno)
	return ok
}

// send validates a claimed request and sends its packets (user_sdma.c,
// check for check; see docs/hfidev.md for what the model simplifies).
func (u *Unit) send(c *context, q *sdmaQueue, info *abi.SDMAReqInfo, iov [][]byte) error {
	expected := info.Opcode() == abi.SDMAOpExpected
	data := iov[1:]
	if expected {
		if len(data) < 2 {
			return unix.EINVAL
		}
		data = data[:len(data)-1]
	}
	if info.NPkts == 0 || len(data) > abi.SDMAMaxDataIovs {
		return unix.EINVAL
	}
	// The PBC says 9B or 16B ([C] hfi2 user_sdma.c check_pbc_16b: on JKR
	// PBC.L2Type 16B; on WFR PacketBypass, which the model refuses: it
	// follows [K] hfi1 there, which has no 16B user SDMA, and a WFR user
	// context could not receive the packet).
	pbc := abi.PBC(le.Uint64(iov[0][abi.SDMAReqInfoSize:]))
	is16B := u.cfg.Chip != abi.ChipWFR && pbc.L2Type() == abi.L2Type16B
	tsize := abi.PktHeaderSize
	if is16B {
		tsize = abi.PktHeader16BSize
	}
	if (u.cfg.Chip == abi.ChipWFR && pbc.Bypass()) || len(iov[0]) < abi.SDMAReqInfoSize+tsize {
		return unix.EINVAL
	}
	tmpl := abi.PktHeader(q.tmpl[:tsize])
	copy(tmpl, iov[0][abi.SDMAReqInfoSize:])
	if u.cfg.Chip == abi.ChipWFR {
		// Without user STATIC_RATE_CTRL the driver clears pbc[2]: the
		// WFR StaticRateControl bits 47:32.
		pbc &^= 0xffff << 32
		tmpl.SetPBC(pbc)
	}
	var (
		h        abi.BTHKDETH
		sc       uint8
		grh      bool
		tmplData int // the first packet's data by the template's LRH
	)
	if is16B {
		h16 := tmpl.Header16B()
		if h16.L2() != abi.L2Type16B {
			return unix.EINVAL // "Non-matching L2"
		}
		h, sc, grh = h16.BTHKDETH(), h16.SC(), h16.L4() == abi.L4IBGlobal
		tmplData = int(h16.PktLen())*abi.FlitSize - abi.Header16BSize - abi.Tail16BSize
	} else {
		h9 := tmpl.Header()
		// SC is LRH [15:12] and PBC.SC4.
		h, sc, grh = h9.BTHKDETH(), h9.VL()|uint8(b2i(pbc.SC4()))<<4, h9.LNH() == abi.LNHIBGlobal
		tmplData = int(h9.PktLen())*4 - (abi.PktHeaderSize - abi.PBCSize) - abi.ICRCSize
	}
	if h.Opcode()&abi.UserOpcodeMask != abi.UserOpcodeValue {
		return unix.EINVAL
	}
	// VL from the PBC must be operational and match the SC through the
	// SC→VL table: the model's maps SC 0..7 to VL 0..7 and has 8 data VLs.
	if vl := pbc.VL(); vl >= numDataVLs || sc >= numDataVLs || vl != sc {
		return unix.EINVAL
	}
	// The P_Key table holds the default partition only.
	if h.PKey()&0x7fff != 0x7fff {
		return unix.EINVAL
	}
	if grh {
		return unix.EINVAL
	}
	dataLen := 0
	for _, d := range data {
		dataLen += len(d)
	}
	var tids abi.TIDList
	if expected {
		if tids = abi.TIDList(iov[len(iov)-1]); tids.Len() == 0 || tids.Len() > abi.SDMAMaxTIDEntries {
			return unix.EINVAL
		}
	}
	if !u.sdmaRunning() {
		return unix.ECOMM
	}
	q.writeComp(info.CompIdx, abi.SDMAQueued, 0)

	// The model walks the whole request before sending any of it; see
	// checkLengths's note in sdma_walk.go.
	check := newSDMAWalk(info, h, tmplData, is16B, dataLen, tids)
	for range int(info.NPkts) {
		if _, err := check.next(); err != nil {
			return err
		}
	}
	psnMask := uint32(0xffffff)
	if u.cfg.Caps&abi.CapExtendedPSN != 0 {
		psnMask = 0x7fffffff
	}
	psn0, koff := h.PSN(), h.SWData(6)
	src := dataCursor{iov: data}
	w := newSDMAWalk(info, h, tmplData, is16B, dataLen, tids)
	for seq := range int(info.NPkts) {
		p, _ := w.next()
		lrhLen := w.lrhBytes(p.n)
		// A 9B packet leaves without its ICRC (the chip adds it); a 16B
		// one with the tail quadword the driver appends (zeros here).
		n := abi.PBCSize + lrhLen
		if !is16B {
			n -= abi.ICRCSize
		}
		pkt := q.pkt[:n]
		copy(pkt, tmpl)
		ph := abi.PktHeader(pkt)
		ph.SetPBC(pbc&^abi.PBCMaxLengthDWs | abi.PBC(w.pbcDWs(p.n)))
		var hh abi.BTHKDETH
		if is16B {
			ph.Header16B().SetPktLen(uint16(lrhLen / abi.FlitSize))
			hh = ph.Header16B().BTHKDETH()
		} else {
			ph.Header().SetPktLen(uint16(lrhLen / 4))
			hh = ph.Header().BTHKDETH()
		}
		if seq > 0 {
			hh.SetPSN(pktPSN(psn0, seq, expected)&psnMask, seq == int(info.NPkts)-1)
			hh.SetSWData(6, koff)
			if expected {
				hh.SetKDETHTID(p.tid, p.tidOff)
			}
		}
		body := pkt[tsize:]
		src.read(body[:p.n])
		clear(body[p.n:])
		koff += uint32(p.n)
		if e := u.egress.Load(); e != nil {
			(*e)(c.sendCtxt, pkt)
		}
	}
	return nil
}

// pktPSN is set_pkt_bth_psn: the template's PSN plus seq, of which an
// EXPECTED request advances only the low 11 bits (the KDETH sequence;
// HFI1_KDETH_BTH_SEQ_MASK), leaving the generation above them.
func pktPSN(psn0 uint32, seq int, expected bool) uint32 {
	if expected {
		return psn0&^kdethSeqMask | (psn0+uint32(seq))&kdethSeqMask
	}
	return psn0 + uint32(seq)
}

const kdethSeqMask = 0x7ff

// numDataVLs is the model port's operational data VLs.
const numDataVLs = 8

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dataCursor reads a request's data iovecs in order.
type dataCursor struct {
	iov  [][]byte
	off  int
	sent int
}

func (d *dataCursor) read(p []byte) {
	for len(p) > 0 {
		k := copy(p, d.iov[0][d.off:])
		p, d.off, d.sent = p[k:], d.off+k, d.sent+k
		if d.off == len(d.iov[0]) {
			d.iov, d.off = d.iov[1:], 0
		}
	}
}

// writeComp stores a slot's {status, errcode} in one 64-bit store, which
// also satisfies the driver's "errcode before status".
func (q *sdmaQueue) writeComp(slot uint16, st abi.SDMACompState, errno unix.Errno) {
	storeWord(q.comp, int(slot)*abi.SDMACompEntrySize, uint64(st)|uint64(errno)<<32)
}

func (q *sdmaQueue) complete(slot uint16, st abi.SDMACompState, errno unix.Errno) {
	q.free(slot)
	q.writeComp(slot, st, errno)
}

func (q *sdmaQueue) free(slot uint16) {
	q.inUse[slot] = false
	q.nReqs--
}

// HoldSDMACompletions makes requests accepted from now on keep their slots
// QUEUED (and in use) until ReleaseSDMACompletions: a test's way to fill
// the ring (EBADSLT, ENOSPC) and to complete out of order.
func (u *Unit) HoldSDMACompletions(hold bool) { u.sdmaHold.Store(hold) }

// ReleaseSDMACompletions completes up to n held requests (all with n < 0)
// as COMPLETE, oldest first or, with newestFirst, newest first (requests
// on different engines may complete out of order), and returns how many
// it completed.
func (u *Unit) ReleaseSDMACompletions(n int, newestFirst bool) int {
	u.mu.Lock()
	ctxts := append([]*context(nil), u.ctxts...)
	u.mu.Unlock()
	done := 0
	for _, c := range ctxts {
		if c == nil || c.sdma == nil {
			continue
		}
		q := c.sdma
		q.mu.Lock()
		for len(q.held) > 0 && (n < 0 || done < n) {
			var slot uint16
			if newestFirst {
				slot, q.held = q.held[len(q.held)-1], q.held[:len(q.held)-1]
			} else {
				slot, q.held = q.held[0], q.held[1:]
			}
			q.complete(slot, abi.SDMAComplete, 0)
			done++
		}
		q.mu.Unlock()
	}
	return done
}

// SetSDMARunning stops or restarts the unit's SDMA engines; a request
// made while they are stopped fails with ECOMM ("engine down").
func (u *Unit) SetSDMARunning(run bool) { u.sdmaStopped.Store(!run) }

// sdmaRunning: the engine is running unless SetSDMARunning stopped it or
// the link is down (the driver's engines leave s99_running on a link
// down and return on link up: sdma.c, e85_link_down, sdma_all_running).
func (u *Unit) sdmaRunning() bool { return !u.sdmaStopped.Load() && !u.portDown.Load() }
