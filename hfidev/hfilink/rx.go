package hfilink

import (
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
)

// Recv rebuilds the frames of the packets waiting in the context's
// RcvHdrQ into bufs, up to len(bufs), and gives their entries and eager
// space back to the chip. Entries with a receive error (the payload
// dropped on a full eager area, RHF/RHE errors) and packets that are not
// tunnelled frames from a known LID are released and counted, not
// returned: the engine sees a loss. It never blocks.
func (l *Link) Recv(bufs [][]byte, sizes []int) (int, error) {
	n := min(len(bufs), len(sizes))
	got := 0
	for got < n {
		p, ok := l.rcv.Poll()
		if !ok {
			break
		}
		k := l.rebuild(p, bufs[got][:cap(bufs[got])])
		l.rcv.Release()
		if k > 0 {
			sizes[got] = k
			got++
		}
	}
	l.st.rxFrames.Add(uint64(got))
	return got, nil
}

// rebuild writes the RoCEv2 frame that p carries into buf and returns its
// length, 0 when p is dropped.
func (l *Link) rebuild(p *hfidev.Packet, buf []byte) int {
	if p.Err != nil {
		l.st.rxErrors.Add(1)
		return 0
	}
	h := p.Header
	mark := h.SWData(0)
	from := l.findLID(h.SLID())
	if h.Opcode() != TunnelOpcode || mark&tunnelMask != TunnelMark || from == nil {
		l.st.rxForeign.Add(1)
		return 0
	}
	hl := from.rx.HeaderLen()
	n := hl + wire.BTHSize + len(p.Payload) + wire.ICRCSize
	if n > len(buf) {
		l.st.rxTooLarge.Add(1)
		return 0
	}
	frame := buf[:n]
	bth := wire.BTH(frame[hl : hl+wire.BTHSize])
	copy(bth, h[8:8+wire.BTHSize]) // the BTH as carried: flags, P_Key, F/B, A, PSN
	bth[0] = byte(mark)
	bth.SetDestQP(h.SWData(1))
	copy(frame[hl+wire.BTHSize:], p.Payload)
	le.PutUint32(frame[n-wire.ICRCSize:], h.SWData(3))
	if !from.rx.PutHeaders(frame) {
		l.st.rxTooLarge.Add(1) // beyond an IP length
		return 0
	}
	be.PutUint16(frame[hl-wire.UDPSize:], uint16(h.SWData(2)))
	return n
}
