package rxereplay

// The SIDR captures: udaddy over rdma_cm's UD port space between
// softfabric (`softfabric udaddy`: fabric's AV.InsertCM and DGRAM passive
// endpoint over dataplane/ibcm, through the daemon) and udaddy on rxe:
// one SIDR_REQ and its SIDR_REP on QP1, then two datagrams each way, each
// with the sender's QPN as immediate data. The exchange is checked as
// rdma_cm builds it, and softfabric's side replayed through a fresh
// ibcm.Agent as fabric drives it, byte for byte.

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/wire"
)

const (
	// sfClientSIDR has softfabric's `udaddy -s` resolve udaddy's server
	// on rxe; rxeClientSIDR has udaddy's client on rxe resolve
	// softfabric's `udaddy`.
	sfClientSIDR  = "rdmacm-udaddy-sf-client.pcapng"
	rxeClientSIDR = "rdmacm-udaddy-rxe-client.pcapng"
	// udaddyPort is udaddy's (fixed) port; udpQKey rdma_cm's Q_Key of
	// its UDP port space (RDMA_UDP_QKEY), fabric's default DGRAM Q_Key.
	udaddyPort = 7174
	udpQKey    = 0x01234567
)

// sidrExchange is a capture's SIDR_REQ and SIDR_REP, checked against
// each other and against the datagrams that follow them.
type sidrExchange struct {
	req, rep *cmFrame
	// qpn and reqQPN are the QPNs of the resolved queue pair (the
	// responder's) and the requester's, as the datagrams show them.
	qpn, reqQPN uint32
}

func sidrFrames(t *testing.T, c *capture, sfRequests bool) *sidrExchange {
	t.Helper()
	fs := cmMADs(t, c)
	if len(fs) != 2 || fs[0].attr() != mad.AttrSIDRREQ || fs[1].attr() != mad.AttrSIDRREP ||
		fs[0].fromRxe == sfRequests || fs[1].fromRxe != sfRequests {
		t.Fatalf("%s: CM MADs %s, want the requester's SIDR_REQ and the responder's SIDR_REP",
			c.name, cmSequence(fs, func(bool) bool { return true }))
	}
	x := &sidrExchange{req: fs[0], rep: fs[1]}
	req, rep := mad.SIDRREQ(x.req.m.Data()), mad.SIDRREP(x.rep.m.Data())
	// As cma_resolve_ib_udp builds it: the UDP port space's service ID,
	// the default P_Key, rdma_cm's header with both addresses.
	if req.ServiceID() != mad.ServiceID(mad.PortSpaceUDP, udaddyPort) || req.PKey() != 0xffff {
		t.Errorf("%s: %v: service ID %#x, P_Key %#x", c.name, x.req, req.ServiceID(), req.PKey())
	}
	reqIP, repIP := rxeIP, sfIP
	if sfRequests {
		reqIP, repIP = sfIP, rxeIP
	}
	if h := mad.CMAHeader(req.PrivateData()); h.Version() != mad.CMAVersion || h.IPVersion() != 4 || h.Src() != reqIP || h.Dst() != repIP || h.Port() == 0 {
		t.Errorf("%s: %v: rdma_cm header %+v", c.name, x.req, h.Fields())
	}
	// As cm_format_sidr_rep and rdma_accept build it: the request's ID,
	// TID and service, status success, the UD QP and rdma_cm's Q_Key.
	if rep.RequestID() != req.RequestID() || x.rep.tid() != x.req.tid() || rep.ServiceID() != req.ServiceID() ||
		rep.Status() != mad.SIDRSuccess || rep.QKey() != udpQKey || rep.QPN() == 0 || rep.InfoLength() != 0 {
		t.Errorf("%s: %v answers %v with %+v", c.name, x.rep, x.req, rep.Fields())
	}
	// udaddy's datagrams: the requester's first (to the QPN and Q_Key
	// the SIDR_REP named), with its QPN as immediate data; the
	// responder's answers go to that QPN with rdma_cm's Q_Key too.
	var n [2]int
	for _, f := range c.frames {
		if f.p.BTH().DestQP() == 1 {
			continue
		}
		if f.p.Opcode != wire.UDSendOnlyImm {
			t.Fatalf("%s: %v: want udaddy's UD SEND with immediate data", c.name, f)
		}
		fromReq := f.fromRxe != sfRequests
		d, imm := f.p.DETH(), f.p.ImmDt().Imm()
		switch {
		case fromReq && (f.p.BTH().DestQP() != rep.QPN() || d.QKey() != udpQKey || imm != d.SrcQP()):
			t.Errorf("%s: %v: to QP %#x with Q_Key %#x, immediate %#x from QP %#x; want the SIDR_REP's QP %#x and %#x, and its own QPN",
				c.name, f, f.p.BTH().DestQP(), d.QKey(), imm, d.SrcQP(), rep.QPN(), udpQKey)
		case fromReq:
			x.reqQPN, x.qpn = d.SrcQP(), rep.QPN()
		case f.p.BTH().DestQP() != x.reqQPN || d.SrcQP() != rep.QPN() || d.QKey() != udpQKey || imm != rep.QPN():
			t.Errorf("%s: %v: the answer goes to QP %#x from %#x with Q_Key %#x, immediate %#x", c.name, f,
				f.p.BTH().DestQP(), d.SrcQP(), d.QKey(), imm)
		}
		if fromReq {
			n[0]++
		} else {
			n[1]++
		}
	}
	if n != [2]int{2, 2} {
		t.Errorf("%s: %d datagrams from the requester, %d answers; want 2 and 2", c.name, n[0], n[1])
	}
	return x
}

func TestSIDRReplaySoftfabricClient(t *testing.T) {
	// softfabric's udaddy client: AV.InsertCM calls ResolveSIDR with
	// rdma_cm's header (the port fabric drew, the one value rxe echoes
	// nowhere, is taken from the capture) and waits for EventSIDRReply.
	c := load(t, sfClientSIDR)
	x := sidrFrames(t, c, true)
	// What softfabric chose, as rxe echoed it: the request ID and TID.
	reqID := mad.SIDRREP(x.rep.m.Data()).RequestID()
	r := newCMReplay(t, c, reqID, []uint64{uint64(reqID), x.rep.tid()}, []string{"the request ID", "the SIDR_REQ's TID"})
	port := mad.CMAHeader(mad.SIDRREQ(x.req.m.Data()).PrivateData()).Port()
	var id ibcm.ID
	r.run(map[mad.AttrID]func(*cmFrame){
		mad.AttrSIDRREQ: func(f *cmFrame) {
			priv := make([]byte, mad.CMAHeaderSize, mad.CMAHeaderSize+1)
			mad.CMAHeader(priv).Encode(&mad.CMAHeaderFields{SrcPort: port, Src: sfIP, Dst: rxeIP})
			priv = append(priv, fabricFrame(nil)...)
			var err error
			id, err = r.a.ResolveSIDR(r.now, ibcm.SIDRParams{ServiceID: mad.ServiceID(mad.PortSpaceUDP, udaddyPort),
				RemoteGID: ibcm.GIDFromAddr(rxeIP), PrivateData: priv})
			if err != nil {
				t.Fatalf("%v: ResolveSIDR: %v", f, err)
			}
		},
	})
	if uint32(id) != reqID {
		t.Errorf("ResolveSIDR returned ID %#x, want %#x", uint32(id), reqID)
	}
	r.wantEvents(id, ibcm.EventSIDRReply)
	if len(r.events) > 0 {
		if e := r.events[0]; e.SIDRReply.QPN != x.qpn || e.SIDRReply.QKey != udpQKey || e.SIDRReply.Status != mad.SIDRSuccess {
			t.Errorf("EventSIDRReply %+v, want rxe's QP %#x", e.SIDRReply, x.qpn)
		}
	}
	r.wantCleanStats()
}

func TestSIDRReplaySoftfabricServer(t *testing.T) {
	// softfabric's udaddy server: fabric listens on the UDP port's
	// service; on EventSIDRRequest (rdma_cm's header checked) the
	// application opens a DGRAM endpoint and Accept answers with its QPN,
	// fabric's Q_Key and the length byte of no private data.
	c := load(t, rxeClientSIDR)
	x := sidrFrames(t, c, false)
	// The responder's ID is never on the wire: any will do.
	const sidrID = 0x0001_0203
	r := newCMReplay(t, c, sidrID, []uint64{sidrID}, []string{"the SIDR request's ID"})
	if err := r.a.Listen(mad.ServiceID(mad.PortSpaceUDP, udaddyPort), fabricBacklog); err != nil {
		t.Fatal(err)
	}
	var id ibcm.ID
	r.react = func(e ibcm.Event) {
		if e.Type != ibcm.EventSIDRRequest {
			return
		}
		if h := mad.CMAHeader(e.SIDRRequest.PrivateData); !h.IsValid() || h.Version() != mad.CMAVersion {
			t.Errorf("request %#x: fabric would refuse it: rdma_cm header %x", uint32(e.ID), e.SIDRRequest.PrivateData)
			return
		}
		id = e.ID
	}
	r.run(map[mad.AttrID]func(*cmFrame){
		mad.AttrSIDRREP: func(f *cmFrame) {
			if id == 0 {
				t.Fatalf("%v: no request to answer; events: %s", f, r.eventTypes())
			}
			err := r.a.SIDRReply(r.now, id, ibcm.SIDRReplyParams{Status: mad.SIDRSuccess, QPN: x.qpn, QKey: udpQKey,
				PrivateData: fabricFrame(nil)})
			if err != nil {
				t.Fatalf("%v: SIDRReply: %v", f, err)
			}
		},
	})
	r.wantEvents(id, ibcm.EventSIDRRequest)
	r.wantCleanStats()
}
