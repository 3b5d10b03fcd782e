package ibcm

import (
	"encoding/binary"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// fuzzAgent is an agent in every role at once: listening and accepting,
// answering SIDR requests, with a connection of its own in REQ_SENT and a
// SIDR request out, so that fuzzed MADs can reach every handler.
func fuzzAgent(t testing.TB) (*wire, *node, []uint32) {
	w := newWire(t)
	n := w.add(peerB, guidB, Config{})
	n.a.Listen(service, 4)
	n.a.Listen(udpService, 4)
	n.onEvent = func(n *node, e Event) {
		switch e.Type {
		case EventSIDRRequest:
			if e.SIDRRequest.RequestID&1 == 0 {
				n.a.SIDRReply(n.w.now, e.ID, SIDRReplyParams{QPN: 0x55, QKey: 0x01234567})
			}
		case EventRequest:
			if e.Request.LocalQPN&1 == 0 {
				n.a.Accept(n.w.now, e.ID, RepParams{QPN: 0x33})
			}
		case EventReply:
			n.a.SendRTU(n.w.now, e.ID, nil)
		}
	}
	id, err := n.a.Connect(w.now, ConnectParams{ServiceID: service, RemoteGID: peerA.GID, QPN: 0x44})
	if err != nil {
		t.Fatal(err)
	}
	sid, err := n.a.ResolveSIDR(w.now, SIDRParams{ServiceID: udpService, RemoteGID: peerA.GID})
	if err != nil {
		t.Fatal(err)
	}
	return w, n, []uint32{uint32(id), uint32(sid)}
}

// fuzzSeeds returns the MADs of a whole handshake and disconnect, and of
// a service ID resolution.
func fuzzSeeds(t testing.TB) [][]byte {
	w, a, _ := pair(t)
	id := connect(t, w, a, 0x11)
	w.run()
	a.a.Disconnect(w.now, id, nil)
	w.run()
	var out [][]byte
	for _, p := range w.log {
		out = append(out, p.b)
	}
	w, a, _ = sidrPair(t)
	resolve(t, w, a)
	w.run()
	for _, p := range w.log {
		out = append(out, p.b)
	}
	return out
}

func FuzzReceive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, false, uint16(0))
		f.Add(append([]byte{0}, s[mad.HeaderSize:]...), true, uint16(1000))
	}
	f.Add([]byte{}, false, uint16(0))
	f.Add(make([]byte, 3*mad.Size), true, uint16(65535))
	f.Fuzz(func(t *testing.T, in []byte, craft bool, step uint16) {
		w, n, ids := fuzzAgent(t)
		// Arbitrary bytes, or, with craft, a valid CM header on each chunk
		// of 1+232 bytes: an attribute selector, then the class data with
		// the receiver's comm ID (a SIDR_REP's request ID: the first word)
		// patched in to hit live connections and requests.
		msgs := [][]byte{in}
		if craft {
			msgs = nil
			for len(in) > 0 {
				k := min(len(in), 1+mad.DataSize)
				chunk := in[:k]
				in = in[k:]
				b := make([]byte, mad.Size)
				h := mad.CMHeader(mad.AttrREQ+mad.AttrID(chunk[0]%uint8(mad.NumCMAttrs)), uint64(len(in)))
				mad.MAD(b).EncodeHeader(&h)
				copy(b[mad.HeaderSize:], chunk[1:])
				if chunk[0]&0x80 != 0 {
					for id := range n.a.conns {
						ids = append(ids, id)
					}
					off := mad.HeaderSize + 4
					if chunk[0]&0x40 != 0 {
						off = mad.HeaderSize
					}
					binary.BigEndian.PutUint32(b[off:], ids[int(chunk[0])%len(ids)])
				}
				msgs = append(msgs, b)
			}
		}
		for _, m := range msgs {
			n.a.Receive(w.now, peerA, m)
			checkInvariants(t, n.a)
			w.queue = nil // the peer is silent
			w.advance(int64(step) * ms)
			checkInvariants(t, n.a)
		}
		// Whatever happened, only established connections outlive the
		// peer's patience: at most 16 tries of MaxMRAWait.
		w.advance(16*n.a.Config().MaxMRAWait + 10*sec)
		w.queue = nil
		checkInvariants(t, n.a)
		for _, c := range n.a.conns {
			if c.state != StateEstablished {
				t.Fatalf("conn %#x left in %v", c.id, c.state)
			}
		}
	})
}
