package mad

import (
	"encoding/hex"
	"net/netip"
	"reflect"
	"testing"
)

// rxeREQ is the first MAD of test/fixtures/rxe/rdmacm-req.pcap: the REQ
// that rping's client on Linux rxe (rdma_cm, RDMA_PS_TCP port 7174) sent
// from 198.18.1.2 to 198.18.1.1, as captured on the wire.
const rxeREQ = "0107020300000000000000025c14935200100000000000005293145c00000000" +
	"0000000001061c06505400fffe18010200000000000000000000110100000001" +
	"000000a053dee2a7ffff37f0ffffffff00000000000000000000ffffc6120102" +
	"00000000000000000000ffffc6120101c0032000004000980000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000" +
	"000000000040e654000000000000000000000000c61201020000000000000000" +
	"00000000c6120101000000000000000000000000000000000000000000000000" +
	"0000000000000000000000000000000000000000000000000000000000000000"

func TestRxeREQ(t *testing.T) {
	b, _ := hex.DecodeString(rxeREQ)
	m, err := ParseCM(b)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's TID is hi_tid << 32 | the comm ID as stored (big-endian
	// bytes read as a little-endian CPU word): cm_form_tid.
	if m.AttributeID() != AttrREQ || m.TransactionID() != 0x000000025c149352 {
		t.Errorf("header %+v", m.Header())
	}
	r := REQ(m.Data())
	gid := func(a string) [16]byte { return netip.MustParseAddr(a).As16() }
	want := REQFields{
		LocalCommID: 0x5293145c, ServiceID: ServiceID(PortSpaceTCP, 7174), LocalCAGUID: 0x505400fffe180102,
		LocalQPN: 0x11, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, Transport: TransportRC, StartingPSN: 0x53dee2,
		LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: MTU1024, RNRRetryCount: 7,
		MaxCMRetries: 15,
		Primary: PathFields{
			LocalLID: PermissiveLID, RemoteLID: PermissiveLID,
			LocalGID: gid("::ffff:198.18.1.2"), RemoteGID: gid("::ffff:198.18.1.1"),
			FlowLabel: 0xc0032, HopLimit: 64, LocalACKTimeout: 19,
		},
		PrivateData: r.PrivateData(),
	}
	if got := r.Fields(); !reflect.DeepEqual(got, want) {
		t.Errorf("REQ\n got %+v\nwant %+v", got, want)
	}
	h := CMAHeader(r.PrivateData())
	if h.Version() != CMAVersion || h.IPVersion() != 4 || h.Port() != 0xe654 ||
		h.Src() != netip.MustParseAddr("198.18.1.2") || h.Dst() != netip.MustParseAddr("198.18.1.1") {
		t.Errorf("cma_hdr %+v", h.Fields())
	}
	// Encoding the decoded fields gives the captured bytes back.
	out := make([]byte, Size)
	hd := m.Header()
	MAD(out).EncodeHeader(&hd)
	REQ(MAD(out).Data()).Encode(&want)
	if hex.EncodeToString(out) != rxeREQ {
		t.Errorf("re-encoded\n got %x\nwant %s", out, rxeREQ)
	}
}
