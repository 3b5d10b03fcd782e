package ibcm

import (
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mad"
)

// rxeREQ is the first MAD of test/fixtures/rxe/rdmacm-req.pcap: rping's
// client on Linux rxe connecting from 198.18.1.2 to 198.18.1.1, port 7174.
const rxeREQ = "0107020300000000000000025c14935200100000000000005293145c00000000" +
	"0000000001061c06505400fffe18010200000000000000000000110100000001" +
	"000000a053dee2a7ffff37f0ffffffff00000000000000000000ffffc6120102" +
	"00000000000000000000ffffc6120101c0032000004000980000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000" +
	"000000000040e654000000000000000000000000c61201020000000000000000" +
	"00000000c6120101000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000"

var (
	rxeClient = PeerFromAddr(netip.MustParseAddr("198.18.1.2"))
	rxeServer = PeerFromAddr(netip.MustParseAddr("198.18.1.1"))
)

// seq is a rand.Source that returns fixed values in turn.
type seq []uint64

func (s *seq) Uint64() uint64 {
	v := (*s)[0]
	*s = (*s)[1:]
	return v
}

// With rxe's parameters, our REQ is byte for byte the one rdma_cm on rxe
// sent.
func TestREQMatchesRxe(t *testing.T) {
	var sent []byte
	src := seq{0x5293145c, 0x000000025c149352} // comm ID, TID
	a := New(Config{
		LocalGUID: 0x505400fffe180102, LocalGID: rxeClient.GID, Rand: &src,
		Send: func(to Peer, b []byte) { sent = append([]byte(nil), b...) },
	})
	priv := make([]byte, mad.CMAHeaderSize)
	mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{
		Src: rxeClient.Addr(), Dst: rxeServer.Addr(), SrcPort: 0xe654,
	})
	_, err := a.Connect(0, ConnectParams{
		ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174), RemoteGID: rxeServer.GID,
		QPN: 0x11, StartingPSN: 0x53dee2, ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, FlowLabel: RDMACMFlowLabel(0xe654, 7174), PrivateData: priv,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(sent); got != rxeREQ {
		t.Errorf("our REQ\n got %s\nwant %s", got, rxeREQ)
	}
}

// rxe's REQ, received: a Request event with its fields, and a REP that
// answers it as a kernel passive side would.
func TestAcceptRxeREQ(t *testing.T) {
	w := newWire(t)
	b := w.add(rxeServer, guidB, Config{})
	b.a.Listen(mad.ServiceID(mad.PortSpaceTCP, 7174), 0)
	b.onEvent = acceptAll(0x12)
	req, _ := hex.DecodeString(rxeREQ)
	b.a.Receive(w.now, rxeClient, req)
	e, ok := b.last(EventRequest)
	if !ok || e.Request.LocalQPN != 0x11 || e.Request.StartingPSN != 0x53dee2 || e.Peer != rxeClient {
		t.Fatalf("events %+v", b.events)
	}
	reps := w.sentOf(rxeServer, mad.AttrREP)
	if len(reps) != 1 || reps[0].to != rxeClient {
		t.Fatalf("%d REPs", len(reps))
	}
	m := mad.MAD(reps[0].b)
	r := mad.REP(m.Data())
	if m.TransactionID() != 0x000000025c149352 || r.RemoteCommID() != 0x5293145c || r.LocalCommID() != uint32(e.ID) {
		t.Errorf("REP ids: tid %#x, %+v", m.TransactionID(), r.Fields())
	}
	// rxe answers with an RTU carrying the same TID.
	rtu := make([]byte, mad.Size)
	h := mad.CMHeader(mad.AttrRTU, m.TransactionID())
	mad.MAD(rtu).EncodeHeader(&h)
	mad.RTU(mad.MAD(rtu).Data()).Encode(&mad.RTUFields{LocalCommID: 0x5293145c, RemoteCommID: uint32(e.ID)})
	b.a.Receive(w.now, rxeClient, rtu)
	if st, _ := b.a.State(e.ID); st != StateEstablished || b.count(EventEstablished) != 1 {
		t.Errorf("state %v, events %v", st, b.types())
	}
	// rping's 15 retransmissions of the REQ change nothing.
	for range 15 {
		b.a.Receive(w.now, rxeClient, req)
	}
	if b.a.Len() != 1 || b.count(EventRequest) != 1 || b.a.Stats().Duplicates != 15 {
		t.Errorf("%d IDs, events %v", b.a.Len(), b.types())
	}
}
