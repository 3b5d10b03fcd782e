package hfilink

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
)

// outcome is what became of a frame given to the chip.
type outcome uint8

const (
	sent    outcome = iota // by PIO: its buffer is free again
	held                   // by SDMA: its buffer waits for the completion
	dropped                // not sent (counted): its buffer is free again
	blocked                // no credits or no SDMA slot now: retry later
)

// TxBuf returns a free transmit buffer (the same one until TxSubmit), or
// nil when every buffer is queued or held by SDMA.
func (l *Link) TxBuf() []byte {
	if l.cur < 0 {
		if len(l.free) == 0 {
			l.reap()
			if len(l.free) == 0 {
				return nil
			}
		}
		l.cur = l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
	}
	return l.bufs[l.cur]
}

// TxSubmit queues the frame built in the last TxBuf, n bytes long, for the
// next Flush; n <= 0 gives the buffer back.
func (l *Link) TxSubmit(n int) {
	b := l.cur
	if b < 0 {
		return
	}
	l.cur = -1
	if n <= 0 {
		l.free = append(l.free, b)
		return
	}
	l.lens[b] = min(n, l.maxFrame)
	l.queue[(l.qhead+l.qlen)%len(l.queue)] = b
	l.qlen++
}

// TxRoom is how many more frames TxBuf and TxSubmit can take now.
func (l *Link) TxRoom() int {
	n := len(l.free)
	if l.cur >= 0 {
		n++
	}
	return n
}

// TxBufSize is the size of every transmit buffer: MaxFrame.
func (l *Link) TxBufSize() int { return l.maxFrame }

// Flush reaps SDMA completions and sends the queued frames in order, each
// by PIO or SDMA; it stops at the first the chip cannot take now (no PIO
// credits after a CREDIT_UPD, or no SDMA slot), which stays queued. Frames
// the link cannot carry are dropped and counted, never returned as errors:
// RC retransmits, as after a loss on the wire.
func (l *Link) Flush() error {
	l.reap()
	l.maybeSweep()
	for l.qlen > 0 {
		b := l.queue[l.qhead]
		switch l.transmit(l.bufs[b][:l.lens[b]], b) {
		case blocked:
			return nil
		case sent, dropped:
			l.free = append(l.free, b)
		case held:
		}
		l.qhead = (l.qhead + 1) % len(l.queue)
		l.qlen--
	}
	return nil
}

// Send copies frames into transmit buffers and flushes them; it takes
// fewer than len(frames) when every buffer is in use.
func (l *Link) Send(frames [][]byte) (int, error) {
	for i, f := range frames {
		if len(f) > l.maxFrame {
			return i, fmt.Errorf("hfilink: frame of %d bytes over MaxFrame %d: %w", len(f), l.maxFrame, link.ErrFrameTooLarge)
		}
		b := l.TxBuf()
		if b == nil {
			if err := l.Flush(); err != nil {
				return i, err
			}
			if b = l.TxBuf(); b == nil {
				return i, nil
			}
		}
		l.TxSubmit(copy(b, f))
	}
	return len(frames), l.Flush()
}

// reap frees the buffers of completed SDMA requests.
func (l *Link) reap() {
	if l.sdma == nil {
		return
	}
	for {
		c, ok := l.sdma.Reap()
		if !ok {
			return
		}
		if b := l.slotBuf[c.Slot]; b >= 0 {
			l.free = append(l.free, b)
			l.slotBuf[c.Slot] = -1
		}
		if c.Status != abi.SDMAComplete {
			l.st.txSDMAErrors.Add(1)
		}
	}
}

// transmit sends frame f (in buffer b) as a KDETH packet, 9B or 16B.
func (l *Link) transmit(f []byte, b int32) outcome {
	p := &l.pkt
	if p.Parse(f) != nil {
		l.st.txMalformed.Add(1)
		return dropped
	}
	to := l.route(p)
	if to == nil {
		l.st.txNoRoute.Add(1)
		return dropped
	}
	if l.exp.ngrants > 0 && carriesPayload(p.Opcode) {
		if o, ok := l.sendExpected(p, to, b); ok {
			return o
		}
	}
	data := f[p.BTHOff+wire.BTHSize : p.End-wire.ICRCSize]
	pad := 0
	if l.h16 && len(data)%abi.FlitSize == 4 {
		// 16B payloads are whole quadwords: the 4 bytes after the data
		// (the frame's ICRC) go along as padding, which the receiver
		// drops (KDETH software dword 5 says how much).
		pad = 4
		data = f[p.BTHOff+wire.BTHSize : p.End-wire.ICRCSize+pad]
	}
	hdr := l.header(p, to, len(data), pad)
	pf := l.pbc(to)
	if n := len(hdr) + len(data); l.sdmaMin >= 0 && n >= l.sdmaMin {
		return l.sendSDMA(pf.Encode(l.chip), hdr, data, b)
	}
	return l.sendPIO(&pf, hdr, data)
}

// pbc is the PBC's fields for a packet to to: on JKR the L2 type and the
// DLID (and for 16B InsertICRC, as OPX sets it).
func (l *Link) pbc(to *peer) abi.PBCFields {
	pf := abi.PBCFields{}
	switch {
	case l.chip == abi.ChipWFR:
	case l.h16:
		pf.L2Type, pf.DLID, pf.InsertICRC = abi.L2Type16B, uint32(to.lid), true
	default:
		pf.L2Type, pf.DLID = abi.L2Type9B, uint32(to.lid)
	}
	return pf
}

// header writes into l.hdr the header of frame p towards to, for a packet
// carrying n bytes after the header of which the last pad are padding,
// and returns it: 9B or 16B (Config.Header16B).
func (l *Link) header(p *wire.Packet, to *peer, n, pad int) []byte {
	bth := p.BTH()
	qpn := bth.DestQP()
	t := abi.BTHKDETHFields{
		Opcode: TunnelOpcode, SE: bth.Solicited(), MigReq: bth.MigReq(), PadCnt: uint8(bth.PadCount()), TVer: bth.TVer(),
		PKey: bth.PKey(), FECN: bth.FECN(), BECN: bth.BECN(),
		QP:     to.kdethQP(qpn),
		AckReq: bth.AckReq(),
		// The IB PSN and the 7 reserved bits above it, as sent.
		PSN:  be.Uint32(bth[8:]) & 0x7fffffff,
		KVer: abi.KDETHVersion, JKey: to.jkey,
	}
	t.SWData[0] = TunnelMark | uint32(p.Opcode)
	t.SWData[1] = qpn
	t.SWData[2] = uint32(p.SrcPort())
	t.SWData[3] = p.ICRC()
	t.SWData[5] = uint32(pad)
	return l.encode(to, n, &t, uint16(qpn))
}

// encode writes into l.hdr a header towards to for a packet of n payload
// bytes with BTH and KDETH t, in the link's format, and returns it. A 16B
// LRH gets the BTH's P_Key, FECN and BECN (where 16B carries them: a
// congestion mark on the way lands in the LRH), route control 0 (in
// order), SC 0, and entropy, which adaptive routing hashes.
func (l *Link) encode(to *peer, n int, t *abi.BTHKDETHFields, entropy uint16) []byte {
	if l.h16 {
		h := abi.Header16BFields{
			SLID: uint32(l.selfLID), DLID: uint32(to.lid), PktLen: abi.PktLen16B(n),
			L2: abi.L2Type16B, L4: abi.L4IBLocal, LRHPKey: t.PKey, FECN: t.FECN, BECN: t.BECN, Entropy: entropy,
			BTHKDETH: *t,
		}
		h.Encode(l.hdr[:])
		return l.hdr[:abi.Header16BSize]
	}
	h := abi.Header9BFields{LNH: abi.LNHIBLocal, DLID: to.lid, SLID: l.selfLID,
		PktLen: uint16((abi.Header9BSize + n + abi.ICRCSize) / 4), BTHKDETHFields: *t}
	h.Encode(l.hdr[:])
	return l.hdr[:abi.Header9BSize]
}

// tr is the BTH and KDETH of the header in l.hdr.
func (l *Link) tr() abi.BTHKDETH {
	if l.h16 {
		return abi.Header16B(l.hdr[:]).BTHKDETH()
	}
	return abi.Header9B(l.hdr[:]).BTHKDETH()
}

// route finds the table entry of p's destination, checking that its
// source is this port (the receiver rebuilds the source from the SLID, and
// the ICRC covers it).
func (l *Link) route(p *wire.Packet) *peer {
	f := p.Frame
	if p.IPv6 == l.ipv4 {
		return nil
	}
	if p.IPv6 {
		if [16]byte(f[p.L3+8:]) != l.selfAddr {
			return nil
		}
		return l.findAddr(f[p.L3+24 : p.L3+40])
	}
	if [4]byte(f[p.L3+12:]) != [4]byte(l.selfAddr[12:]) {
		return nil
	}
	return l.findAddr(f[p.L3+16 : p.L3+20])
}

// sendPIO writes the packet (header hdr, 9B or 16B) into the PIO buffer,
// asking for a credit return when a quarter of the credits or fewer
// would be left, and forcing one (CREDIT_UPD) when the packet does not
// fit.
func (l *Link) sendPIO(pf *abi.PBCFields, hdr, data []byte) outcome {
	n := len(hdr) + len(data)
	if l.h16 {
		n += abi.Tail16BSize
	}
	blocks := abi.PIOBlocks(n)
	pf.CreditReturn = int(l.pio.Avail()) < blocks+int(l.credits)/4
	pbc := pf.Encode(l.chip)
	err := l.pio.Send(pbc, hdr, data)
	if errors.Is(err, hfidev.ErrNoCredits) {
		l.st.creditUpdates.Add(1)
		if err = l.ctx.CreditUpdate(); err == nil {
			err = l.pio.Send(pbc, hdr, data)
		}
		if errors.Is(err, hfidev.ErrNoCredits) {
			return blocked
		}
	}
	if errors.Is(err, hfidev.ErrHalted) {
		l.st.txHalts.Add(1)
		if err = l.ctx.Reset(); err == nil {
			err = l.pio.Send(pbc, hdr, data)
		}
	}
	if err != nil {
		l.fail(err)
		return dropped
	}
	l.st.txPIO.Add(1)
	return sent
}

// sendSDMA submits the packet (header hdr) as a one-packet EAGER request,
// whose header the driver sends as given; buffer b is held until the
// completion.
func (l *Link) sendSDMA(pbc abi.PBC, hdr, data []byte, b int32) outcome {
	iov := l.one[:0]
	if len(data) > 0 {
		l.one[0] = data
		iov = l.one[:]
	}
	o := l.submit(pbc, hdr, fragFor(len(data)), iov, nil, 0, b)
	l.one[0] = nil
	return o
}

// fragFor is the SDMA fragment size of a one-packet request carrying n
// bytes: n rounded up to whole 64-byte blocks, one block at least.
func fragFor(n int) int {
	return max(abi.PIOBlockSize, (n+abi.PIOBlockSize-1)&^(abi.PIOBlockSize-1))
}

// submit sends the packet in buffer b as one SDMA request: EXPECTED into
// tids from byte off when tids is set, EAGER otherwise. A full ring is
// reaped and tried once more: blocked if it stays full. Another error
// drops the packet (counted); sent, the buffer is held until the
// completion.
func (l *Link) submit(pbc abi.PBC, hdr []byte, frag int, iov [][]byte, tids []abi.TIDEntry, off int, b int32) outcome {
	slot, err := l.submitOnce(pbc, hdr, frag, iov, tids, off)
	if errors.Is(err, hfidev.ErrSDMARingFull) {
		l.reap()
		slot, err = l.submitOnce(pbc, hdr, frag, iov, tids, off)
	}
	switch {
	case errors.Is(err, hfidev.ErrSDMARingFull):
		return blocked
	case err != nil:
		l.fail(err)
		return dropped
	}
	l.slotBuf[slot] = b
	l.st.txSDMA.Add(1)
	return held
}

func (l *Link) submitOnce(pbc abi.PBC, hdr []byte, frag int, iov [][]byte, tids []abi.TIDEntry, off int) (uint16, error) {
	if tids != nil {
		return l.sdma.SubmitExpected(pbc, hdr, frag, iov, tids, off)
	}
	return l.sdma.Submit(pbc, hdr, frag, iov)
}

func (l *Link) fail(err error) {
	l.st.txErrors.Add(1)
	l.lastErr.Store(&err)
}
