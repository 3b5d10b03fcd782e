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

// transmit sends frame f (in buffer b) as a 9B KDETH packet.
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
	l.header(p, to, len(data))
	pf := abi.PBCFields{}
	if l.chip != abi.ChipWFR {
		pf.L2Type, pf.DLID = abi.L2Type9B, uint32(to.lid)
	}
	if n := abi.Header9BSize + len(data); l.sdmaMin >= 0 && n >= l.sdmaMin {
		return l.sendSDMA(pf.Encode(l.chip), data, b)
	}
	return l.sendPIO(&pf, data)
}

// header writes the 9B header of frame p towards to into l.hdr, for a
// packet carrying n bytes after the header.
func (l *Link) header(p *wire.Packet, to *peer, n int) {
	bth := p.BTH()
	qpn := bth.DestQP()
	h := abi.Header9BFields{
		LNH: abi.LNHIBLocal, DLID: to.lid, SLID: l.selfLID,
		PktLen: uint16((abi.Header9BSize + n + abi.ICRCSize) / 4),
		Opcode: TunnelOpcode, SE: bth.Solicited(), MigReq: bth.MigReq(), PadCnt: uint8(bth.PadCount()), TVer: bth.TVer(),
		PKey: bth.PKey(), FECN: bth.FECN(), BECN: bth.BECN(),
		QP:     abi.KDETHQPPrefix<<16 | uint32(to.ctxts[int(qpn)%len(to.ctxts)]&0xff),
		AckReq: bth.AckReq(),
		// The IB PSN and the 7 reserved bits above it, as sent.
		PSN:  be.Uint32(bth[8:]) & 0x7fffffff,
		KVer: abi.KDETHVersion, JKey: to.jkey,
	}
	h.SWData[0] = TunnelMark | uint32(p.Opcode)
	h.SWData[1] = qpn
	h.SWData[2] = uint32(p.SrcPort())
	h.SWData[3] = p.ICRC()
	h.Encode(l.hdr[:])
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

// sendPIO writes the packet into the PIO buffer, asking for a credit
// return when a quarter of the credits or fewer would be left, and
// forcing one (CREDIT_UPD) when the packet does not fit.
func (l *Link) sendPIO(pf *abi.PBCFields, data []byte) outcome {
	blocks := abi.PIOBlocks(abi.Header9BSize + len(data))
	pf.CreditReturn = int(l.pio.Avail()) < blocks+int(l.credits)/4
	pbc := pf.Encode(l.chip)
	err := l.pio.Send(pbc, l.hdr[:], data)
	if errors.Is(err, hfidev.ErrNoCredits) {
		l.st.creditUpdates.Add(1)
		if err = l.ctx.CreditUpdate(); err == nil {
			err = l.pio.Send(pbc, l.hdr[:], data)
		}
		if errors.Is(err, hfidev.ErrNoCredits) {
			return blocked
		}
	}
	if errors.Is(err, hfidev.ErrHalted) {
		l.st.txHalts.Add(1)
		if err = l.ctx.Reset(); err == nil {
			err = l.pio.Send(pbc, l.hdr[:], data)
		}
	}
	if err != nil {
		l.fail(err)
		return dropped
	}
	l.st.txPIO.Add(1)
	return sent
}

// sendSDMA submits the packet as a one-packet EAGER request, whose header
// the driver sends as given; buffer b is held until the completion.
func (l *Link) sendSDMA(pbc abi.PBC, data []byte, b int32) outcome {
	frag := max(abi.PIOBlockSize, (len(data)+abi.PIOBlockSize-1)&^(abi.PIOBlockSize-1))
	iov := l.one[:0]
	if len(data) > 0 {
		l.one[0] = data
		iov = l.one[:]
	}
	slot, err := l.sdma.Submit(pbc, abi.Header9B(l.hdr[:]), frag, iov)
	if errors.Is(err, hfidev.ErrSDMARingFull) {
		l.reap()
		slot, err = l.sdma.Submit(pbc, abi.Header9B(l.hdr[:]), frag, iov)
		if errors.Is(err, hfidev.ErrSDMARingFull) {
			l.one[0] = nil
			return blocked
		}
	}
	l.one[0] = nil
	if err != nil {
		l.fail(err)
		return dropped
	}
	l.slotBuf[slot] = b
	l.st.txSDMA.Add(1)
	return held
}

func (l *Link) fail(err error) {
	l.st.txErrors.Add(1)
	l.lastErr.Store(&err)
}
