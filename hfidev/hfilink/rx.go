package hfilink

import (
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
)

// Recv rebuilds the frames of the packets waiting in the context's
// RcvHdrQ into bufs, up to len(bufs), and gives their entries and eager
// space back to the chip. Entries with a receive error (the payload
// dropped on a full eager area, RHF/RHE errors) and packets that are not
// tunnelled frames from a known LID are released and counted, not
// returned: the engine sees a loss. It never blocks.
func (l *Link) Recv(bufs [][]byte, sizes []int) (int, error) {
	n := min(len(bufs), len(sizes))
	if len(l.exp.placed) < n {
		l.exp.placed = make([][]byte, n)
	}
	if ev := l.ctx.Events(); ev != 0 {
		l.events(ev)
	}
	got := 0
	for got < n {
		p, ok := l.rcv.Poll()
		if !ok {
			break
		}
		k, placed := l.rebuild(p, bufs[got][:cap(bufs[got])])
		l.rcv.Release()
		l.exp.placed[got] = placed
		if k > 0 {
			sizes[got] = k
			got++
		}
	}
	l.st.rxFrames.Add(uint64(got))
	return got, nil
}

// rebuild writes the RoCEv2 frame that p carries into buf and returns its
// length, 0 when p is dropped or was not a frame (a grant); for a frame
// whose payload the chip placed (expected.go) also the payload. p may be
// 9B or 16B, whatever this link sends.
func (l *Link) rebuild(p *hfidev.Packet, buf []byte) (int, []byte) {
	if p.Err != nil {
		l.st.rxErrors.Add(1)
		return 0, nil
	}
	h := p.BTHKDETH()
	mark := h.SWData(0)
	from := l.findLID(p.SLID())
	switch {
	case h.Opcode() != TunnelOpcode || from == nil:
		l.st.rxForeign.Add(1)
		return 0, nil
	case mark == GrantMark:
		l.takeGrant(p, from)
		return 0, nil
	case mark&tunnelMask != TunnelMark:
		l.st.rxForeign.Add(1)
		return 0, nil
	case p.Fields.RcvType == abi.RcvTypeExpected:
		return l.rebuildPlaced(p, from, buf)
	}
	payload := p.Payload
	if p.L2Type == abi.L2Type16B {
		// The padding to a quadword the sender added (tx.go).
		pad := int(h.SWData(5))
		if pad != 0 && pad != 4 || pad > len(payload) {
			l.st.rxForeign.Add(1)
			return 0, nil
		}
		payload = payload[:len(payload)-pad]
	}
	l.sawEager(from, h)
	hl := from.rx.HeaderLen()
	n := hl + wire.BTHSize + len(payload) + wire.ICRCSize
	if n > len(buf) {
		l.st.rxTooLarge.Add(1)
		return 0, nil
	}
	frame := buf[:n]
	copy(frame[hl+wire.BTHSize:], payload)
	if !frameHeaders(frame, p, h, from) {
		l.st.rxTooLarge.Add(1) // beyond an IP length
		return 0, nil
	}
	return n, nil
}

// frameHeaders writes into frame (n bytes: headers, extension headers
// and payload in place or left out, ICRC) the headers of the frame p
// carries from peer from: the BTH as carried with the frame's opcode and
// QPN, the carried ICRC, and the Ethernet/IP/UDP headers of the path from
// the peer with the carried UDP source port. False when the frame is
// beyond an IP length.
func frameHeaders(frame []byte, p *hfidev.Packet, h abi.BTHKDETH, from *peer) bool {
	hl := from.rx.HeaderLen()
	bth := wire.BTH(frame[hl : hl+wire.BTHSize])
	carriedBTH(bth, p, h)
	bth[0] = byte(h.SWData(0))
	bth.SetDestQP(h.SWData(1))
	le.PutUint32(frame[len(frame)-wire.ICRCSize:], h.SWData(3))
	if !from.rx.PutHeaders(frame) {
		return false
	}
	be.PutUint16(frame[hl-wire.UDPSize:], uint16(h.SWData(2)))
	return true
}

// carriedBTH copies the BTH as carried (flags, P_Key, F/B, A, PSN) from
// h, p's BTH and KDETH, into bth. A 16B packet's FECN and BECN are in its
// LRH (where a congestion mark on the way would be set): they are added
// to the BTH's.
func carriedBTH(bth wire.BTH, p *hfidev.Packet, h abi.BTHKDETH) {
	copy(bth, h[:wire.BTHSize])
	if p.Header16B != nil {
		if p.Header16B.FECN() {
			bth[4] |= 0x80
		}
		if p.Header16B.BECN() {
			bth[4] |= 0x40
		}
	}
}
