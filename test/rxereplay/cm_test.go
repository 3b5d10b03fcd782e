package rxereplay

// The RDMA-CM captures: rping over rdma_cm between softfabric (fabric's
// connection manager, dataplane/ibcm, through the daemon) and Linux's
// rdma_cm on rxe. Here every CM MAD is parsed with dataplane/mad and what
// ties the exchange together is checked; cm_replay_test.go replays
// softfabric's side through a fresh ibcm.Agent.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/wire"
)

const (
	// sfClientCM has softfabric's `rping -c` connect to rping's server
	// on rxe; rxeClientCM has rping's client on rxe connect to
	// softfabric's `rping -s`.
	sfClientCM  = "rdmacm-rping-sf-client.pcapng"
	rxeClientCM = "rdmacm-rping-rxe-client.pcapng"

	// gsiQKey is the well-known Q_Key of QP1 (IB_QP1_QKEY).
	gsiQKey = 0x80010000
	// rpingPort is rping's default port.
	rpingPort = 7174
)

// rpingService is the service ID of rping's port in rdma_cm's TCP port
// space.
const rpingService = 0x0106<<16 | rpingPort

// cmFrame is a frame on QP1 and the CM MAD it carries.
type cmFrame struct {
	*frame
	m mad.MAD
}

func (f *cmFrame) attr() mad.AttrID { return f.m.AttributeID() }
func (f *cmFrame) tid() uint64      { return f.m.TransactionID() }

func (f *cmFrame) String() string {
	return fmt.Sprintf("frame %d (%s→%s %v, TID %#x)", f.i, who(f.fromRxe), who(!f.fromRxe), f.attr(), f.tid())
}

func (f *cmFrame) req() mad.REQ   { return mad.REQ(f.m.Data()) }
func (f *cmFrame) rep() mad.REP   { return mad.REP(f.m.Data()) }
func (f *cmFrame) rtu() mad.RTU   { return mad.RTU(f.m.Data()) }
func (f *cmFrame) dreq() mad.DREQ { return mad.DREQ(f.m.Data()) }
func (f *cmFrame) drep() mad.DREP { return mad.DREP(f.m.Data()) }

// cmMADs returns the CM MADs of a capture in order. A frame on QP1 that is
// not a UD SEND from QP1 with the GSI's Q_Key carrying one 256-byte CM
// MAD, or a UD frame elsewhere with the GSI's Q_Key (a MAD that was
// missed), fails the test; other UD frames are an application's
// datagrams (udaddy's).
func cmMADs(t testing.TB, c *capture) []*cmFrame {
	t.Helper()
	var out []*cmFrame
	for _, f := range c.frames {
		d := f.p.DETH()
		if f.p.BTH().DestQP() != 1 && (d == nil || d.QKey() != gsiQKey) {
			continue
		}
		switch {
		case f.p.Opcode != wire.UDSendOnly || f.p.BTH().DestQP() != 1:
			t.Fatalf("%s: %v: want a UD SEND to QP1", c.name, f)
		case d.QKey() != gsiQKey || d.SrcQP() != 1:
			t.Fatalf("%s: %v: DETH Q_Key %#x, source QP %d; want %#x from QP1", c.name, f, d.QKey(), d.SrcQP(), gsiQKey)
		case len(f.p.Payload) != mad.Size:
			t.Fatalf("%s: %v: %d bytes of payload, want one %d-byte MAD", c.name, f, len(f.p.Payload), mad.Size)
		}
		m, err := mad.ParseCM(f.p.Payload)
		if err != nil {
			t.Fatalf("%s: %v: mad.ParseCM: %v", c.name, f, err)
		}
		cf := &cmFrame{frame: f, m: m}
		if !cmViewValid(m) {
			t.Fatalf("%s: %v: not a CM message the views take", c.name, cf)
		}
		out = append(out, cf)
	}
	return out
}

// cmViewValid decodes m's message through its view.
func cmViewValid(m mad.MAD) bool {
	d := m.Data()
	switch m.AttributeID() {
	case mad.AttrREQ:
		r := mad.REQ(d)
		_ = r.Fields()
		return r.IsValid() && r.Primary().IsValid()
	case mad.AttrREP:
		_ = mad.REP(d).Fields()
		return mad.REP(d).IsValid()
	case mad.AttrRTU:
		_ = mad.RTU(d).Fields()
		return mad.RTU(d).IsValid()
	case mad.AttrDREQ:
		_ = mad.DREQ(d).Fields()
		return mad.DREQ(d).IsValid()
	case mad.AttrDREP:
		_ = mad.DREP(d).Fields()
		return mad.DREP(d).IsValid()
	case mad.AttrMRA:
		_ = mad.MRA(d).Fields()
		return mad.MRA(d).IsValid()
	case mad.AttrREJ:
		_ = mad.REJ(d).Fields()
		return mad.REJ(d).IsValid()
	case mad.AttrSIDRREQ:
		_ = mad.SIDRREQ(d).Fields()
		return mad.SIDRREQ(d).IsValid()
	case mad.AttrSIDRREP:
		_ = mad.SIDRREP(d).Fields()
		return mad.SIDRREP(d).IsValid()
	}
	return false
}

// cmSequence writes the CM messages as "softfabric REQ, rxe REP, ...", or
// those of one side only.
func cmSequence(fs []*cmFrame, side func(fromRxe bool) bool) string {
	var s []string
	for _, f := range fs {
		if side(f.fromRxe) {
			s = append(s, who(f.fromRxe)+" "+f.attr().String())
		}
	}
	return strings.Join(s, ", ")
}

// cmExchange is the handshake and disconnect of one connection.
type cmExchange struct {
	all                       []*cmFrame
	req, rep, rtu, dreq, drep *cmFrame
	sfActive                  bool // softfabric sent the REQ
}

// exchange finds the five messages of a capture's one connection; each
// must appear exactly once.
func exchange(t testing.TB, c *capture) *cmExchange {
	t.Helper()
	x := &cmExchange{all: cmMADs(t, c)}
	slots := map[mad.AttrID]**cmFrame{
		mad.AttrREQ: &x.req, mad.AttrREP: &x.rep, mad.AttrRTU: &x.rtu, mad.AttrDREQ: &x.dreq, mad.AttrDREP: &x.drep,
	}
	for _, f := range x.all {
		p := slots[f.attr()]
		if p == nil || *p != nil {
			t.Fatalf("%s: %v: unexpected (sequence: %s)", c.name, f, cmSequence(x.all, func(bool) bool { return true }))
		}
		*p = f
	}
	for a, p := range slots {
		if *p == nil {
			t.Fatalf("%s: no %v (sequence: %s)", c.name, a, cmSequence(x.all, func(bool) bool { return true }))
		}
	}
	x.sfActive = !x.req.fromRxe
	return x
}

// eui64 is the CA GUID made from a MAC address, as rxe makes its node GUID
// (addrconf_addr_eui48) and fabric's nodeGUID makes softfabric's.
func eui64(mac [6]byte) uint64 {
	return binary.BigEndian.Uint64([]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]})
}

// firstRCRequest returns the first RC request a side sent.
func firstRCRequest(t testing.TB, c *capture, fromRxe bool) *frame {
	t.Helper()
	for _, f := range c.frames {
		if f.fromRxe == fromRxe && f.p.DETH() == nil && f.isRequest() {
			return f
		}
	}
	t.Fatalf("%s: no RC request from %s", c.name, who(fromRxe))
	return nil
}

// prefix16 is bits 16–31 of a number softfabric drew at random: under the
// daemon, the application's number (fabric's prefixed source).
func prefix16(v uint64) uint16 { return uint16(v >> 16) }

func TestCMCapturesParse(t *testing.T) {
	for _, tc := range []struct {
		name           string
		sfActive       bool
		seq, sent, got string
	}{
		{
			name: sfClientCM, sfActive: true,
			seq:  "softfabric REQ, rxe REP, softfabric RTU, softfabric DREQ, rxe DREP",
			sent: "softfabric REQ, softfabric RTU, softfabric DREQ",
			got:  "rxe REP, rxe DREP",
		},
		{
			name: rxeClientCM, sfActive: false,
			seq:  "rxe REQ, softfabric REP, rxe RTU, rxe DREQ, softfabric DREP",
			sent: "softfabric REP, softfabric DREP",
			got:  "rxe REQ, rxe RTU, rxe DREQ",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, tc.name)
			fs := cmMADs(t, c)
			// The order per direction, then both together.
			if s := cmSequence(fs, func(r bool) bool { return !r }); s != tc.sent {
				t.Errorf("softfabric sent %q, want %q", s, tc.sent)
			}
			if s := cmSequence(fs, func(r bool) bool { return r }); s != tc.got {
				t.Errorf("rxe sent %q, want %q", s, tc.got)
			}
			if s := cmSequence(fs, func(bool) bool { return true }); s != tc.seq {
				t.Fatalf("CM messages %q, want %q", s, tc.seq)
			}
			x := exchange(t, c)
			if x.sfActive != tc.sfActive {
				t.Fatalf("softfabric active: %v, want %v", x.sfActive, tc.sfActive)
			}
			checkExchange(t, c, x)
		})
	}
}

// checkExchange checks the fields that tie a capture's CM messages to each
// other, to the stations and to the RC traffic.
func checkExchange(t *testing.T, c *capture, x *cmExchange) {
	req, rep, rtu, dreq, drep := x.req.req(), x.rep.rep(), x.rtu.rtu(), x.dreq.dreq(), x.drep.drep()
	activeIP, passiveIP := rxeIP, sfIP
	activeMAC, passiveMAC := c.rxeMAC, c.sfMAC
	if x.sfActive {
		activeIP, passiveIP = sfIP, rxeIP
		activeMAC, passiveMAC = c.sfMAC, c.rxeMAC
	}
	activeID, passiveID := req.LocalCommID(), rep.LocalCommID()

	// Every MAD travels between the two stations' IP addresses.
	for _, f := range x.all {
		from, to := sfIP, rxeIP
		if f.fromRxe {
			from, to = rxeIP, sfIP
		}
		if f.p.Src() != from || f.p.Dst() != to {
			t.Errorf("%v: from %v to %v, want %v to %v", f, f.p.Src(), f.p.Dst(), from, to)
		}
	}

	// The REQ: rping's service, an RC connection over the RoCEv2 path
	// between the two IPv4 addresses, rdma_cm's header in front.
	if id := req.ServiceID(); id != rpingService || !mad.IsCMAServiceID(id) {
		t.Errorf("%v: service ID %#x, want %#x (rdma_cm TCP port %d)", x.req, id, rpingService, rpingPort)
	}
	if ps, port := mad.SplitServiceID(req.ServiceID()); ps != mad.PortSpaceTCP || port != rpingPort {
		t.Errorf("%v: port space %#x port %d", x.req, ps, port)
	}
	if req.Transport() != mad.TransportRC || activeID == 0 || req.LocalQPN() == 0 {
		t.Errorf("%v: transport %v, comm ID %#x, QPN %#x", x.req, req.Transport(), activeID, req.LocalQPN())
	}
	if g := req.LocalCAGUID(); g != eui64(activeMAC) {
		t.Errorf("%v: CA GUID %#x, want %#x (EUI-64 of the requester's MAC)", x.req, g, eui64(activeMAC))
	}
	p := req.Primary().Fields()
	if p.LocalGID != ibcm.GIDFromAddr(activeIP) || p.RemoteGID != ibcm.GIDFromAddr(passiveIP) {
		t.Errorf("%v: primary path GIDs %v → %v, want %v → %v", x.req,
			netip.AddrFrom16(p.LocalGID), netip.AddrFrom16(p.RemoteGID), activeIP, passiveIP)
	}
	if p.LocalLID != mad.PermissiveLID || p.RemoteLID != mad.PermissiveLID || p.SubnetLocal || p.HopLimit != 64 {
		t.Errorf("%v: primary path %+v: want permissive LIDs, routed, hop limit 64", x.req, p)
	}
	h := mad.CMAHeader(req.PrivateData())
	if !h.IsValid() || h.Version() != mad.CMAVersion || h.IPVersion() != 4 || h.Src() != activeIP || h.Dst() != passiveIP || h.Port() == 0 {
		t.Errorf("%v: rdma_cm header %+v, IP version %d: want version 0, IPv4 %v → %v, a port", x.req, h.Fields(), h.IPVersion(), activeIP, passiveIP)
	}
	if x.sfActive {
		// fabric's connectCM gives its QPN as the source port.
		if h.Port() != uint16(req.LocalQPN()) {
			t.Errorf("%v: rdma_cm header port %d, want softfabric's QPN %d", x.req, h.Port(), req.LocalQPN())
		}
	} else if fl := p.FlowLabel; fl != ibcm.RDMACMFlowLabel(h.Port(), rpingPort) {
		// rdma_cm's flow label (cma_get_roce_udp_flow_label).
		t.Errorf("%v: flow label %#x, want %#x from ports %d and %d", x.req, fl, ibcm.RDMACMFlowLabel(h.Port(), rpingPort), h.Port(), rpingPort)
	}

	// The REP answers the REQ: its remote ID is the REQ's local one.
	if rep.RemoteCommID() != activeID || passiveID == 0 || rep.LocalQPN() == 0 {
		t.Errorf("%v: comm IDs %#x/%#x, QPN %#x: want remote ID %#x (the REQ's), a local ID and a QPN", x.rep,
			rep.LocalCommID(), rep.RemoteCommID(), rep.LocalQPN(), activeID)
	}
	if g := rep.LocalCAGUID(); g != eui64(passiveMAC) {
		t.Errorf("%v: CA GUID %#x, want %#x (EUI-64 of the responder's MAC)", x.rep, g, eui64(passiveMAC))
	}
	// The RTU, DREQ and DREP name both IDs from their sender's side; the
	// DREQ the QPN its receiver gave. Here the active side disconnects.
	if rtu.LocalCommID() != activeID || rtu.RemoteCommID() != passiveID {
		t.Errorf("%v: comm IDs %#x/%#x, want %#x/%#x", x.rtu, rtu.LocalCommID(), rtu.RemoteCommID(), activeID, passiveID)
	}
	if x.dreq.fromRxe == x.req.fromRxe {
		if dreq.LocalCommID() != activeID || dreq.RemoteCommID() != passiveID || dreq.RemoteQPN() != rep.LocalQPN() {
			t.Errorf("%v: comm IDs %#x/%#x, QPN %#x, want %#x/%#x, QPN %#x (the REP's)", x.dreq,
				dreq.LocalCommID(), dreq.RemoteCommID(), dreq.RemoteQPN(), activeID, passiveID, rep.LocalQPN())
		}
	} else {
		t.Errorf("%v: the passive side disconnects; the captures have the active side do it", x.dreq)
	}
	if drep.LocalCommID() != dreq.RemoteCommID() || drep.RemoteCommID() != dreq.LocalCommID() {
		t.Errorf("%v: comm IDs %#x/%#x, want %#x/%#x (the DREQ's, swapped)", x.drep,
			drep.LocalCommID(), drep.RemoteCommID(), dreq.RemoteCommID(), dreq.LocalCommID())
	}

	// Transaction IDs. Both the kernel CM and ibcm answer with the TID of
	// the message that opened the exchange: REP and RTU carry the REQ's
	// (cm_req_handler keeps it in cm_id_priv->tid), the DREP the DREQ's
	// (cm_dreq_handler).
	for _, f := range []*cmFrame{x.rep, x.rtu} {
		if f.tid() != x.req.tid() {
			t.Errorf("%v: TID, want the REQ's %#x", f, x.req.tid())
		}
	}
	if x.drep.tid() != x.dreq.tid() {
		t.Errorf("%v: TID, want the DREQ's %#x", x.drep, x.dreq.tid())
	}
	// Requests differ: the kernel forms the TIDs of its REQ and DREQ alike
	// (cm_form_tid: the MAD agent's hi_tid above the comm ID as it lies in
	// memory, big-endian, read little-endian), so rxe's DREQ repeats its
	// REQ's TID; ibcm draws a fresh random TID for each (newTID), which
	// under the daemon carries the application's number in bits 16–31
	// like the comm ID. TIDs of CM Sends are informational: neither side
	// matches them.
	kernelTID := func(f *cmFrame, commID uint32) {
		if uint32(f.tid()) != swap32(commID) || f.tid()>>32 == 0 {
			t.Errorf("%v: TID, want rxe's hi_tid above %#x (comm ID %#x byte-swapped)", f, swap32(commID), commID)
		}
	}
	if x.sfActive {
		// rxe only answers here, with softfabric's TIDs.
		if x.dreq.tid() == x.req.tid() {
			t.Errorf("%v: TID repeats the REQ's; ibcm draws a fresh one", x.dreq)
		}
		for _, v := range []uint64{x.req.tid(), x.dreq.tid()} {
			if prefix16(v) != prefix16(uint64(activeID)) {
				t.Errorf("%s: softfabric's TID %#x: bits 16–31 %#x, want the comm ID's %#x (the daemon's prefix)",
					c.name, v, prefix16(v), prefix16(uint64(activeID)))
			}
		}
	} else {
		kernelTID(x.req, activeID)
		if x.dreq.tid() != x.req.tid() {
			t.Errorf("%v: TID, want the REQ's %#x (cm_form_tid)", x.dreq, x.req.tid())
		}
	}
	if sfID := map[bool]uint32{true: activeID, false: passiveID}[x.sfActive]; prefix16(uint64(sfID)) == 0 {
		t.Errorf("%s: softfabric's comm ID %#x has no application number in bits 16–31", c.name, sfID)
	}

	// The QPNs and PSNs are those of the RC traffic: each side sends to
	// the QPN its peer gave, the passive side from the REQ's starting PSN,
	// the active side from the REP's (cm_req_handler's and
	// cm_rep_handler's sq_psn).
	passiveFromRxe := x.rep.fromRxe
	pf, af := firstRCRequest(t, c, passiveFromRxe), firstRCRequest(t, c, !passiveFromRxe)
	if q := pf.p.BTH().DestQP(); q != req.LocalQPN() || uint32(pf.psn()) != req.StartingPSN() {
		t.Errorf("%v: QP %#x PSN %d, want the REQ's QPN %#x and starting PSN %d", pf, q, pf.psn(), req.LocalQPN(), req.StartingPSN())
	}
	if q := af.p.BTH().DestQP(); q != rep.LocalQPN() || uint32(af.psn()) != rep.StartingPSN() {
		t.Errorf("%v: QP %#x PSN %d, want the REP's QPN %#x and starting PSN %d", af, q, af.psn(), rep.LocalQPN(), rep.StartingPSN())
	}
}

func swap32(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

// madField is a named byte range of a CM MAD, offsets from the MAD's start.
type madField struct {
	name     string
	off, len int
}

var madHeaderFields = []madField{
	{"base version", 0, 1}, {"management class", 1, 1}, {"class version", 2, 1}, {"method", 3, 1},
	{"status", 4, 2}, {"class specific", 6, 2}, {"transaction ID", 8, 8}, {"attribute ID", 16, 2},
	{"reserved", 18, 2}, {"attribute modifier", 20, 4},
}

// cmFields lists the fields of each CM message (IBTA tables 106–113,
// offsets in the class data), for naming where two MADs differ.
var cmFields = func() map[mad.AttrID][]madField {
	ids := []madField{{"local comm ID", 0, 4}, {"remote comm ID", 4, 4}}
	path := func(name string, at int) []madField {
		return []madField{
			{name + " local LID", at, 2}, {name + " remote LID", at + 2, 2},
			{name + " local GID", at + 4, 16}, {name + " remote GID", at + 20, 16},
			{name + " flow label / packet rate", at + 36, 4}, {name + " traffic class", at + 40, 1},
			{name + " hop limit", at + 41, 1}, {name + " SL / subnet local", at + 42, 1},
			{name + " local ACK timeout", at + 43, 1},
		}
	}
	req := []madField{
		{"local comm ID", 0, 4}, {"reserved / ECE vendor ID", 4, 4}, {"service ID", 8, 8},
		{"local CA GUID", 16, 8}, {"reserved", 24, 4}, {"local Q_Key", 28, 4}, {"local QPN", 32, 3},
		{"responder resources", 35, 1}, {"local EECN", 36, 3}, {"initiator depth", 39, 1},
		{"remote EECN", 40, 3}, {"remote CM response timeout / transport / end-to-end flow control", 43, 1},
		{"starting PSN", 44, 3}, {"local CM response timeout / retry count", 47, 1}, {"P_Key", 48, 2},
		{"path MTU / RDC exists / RNR retry count", 50, 1}, {"max CM retries / SRQ / extended transport", 51, 1},
	}
	req = append(req, path("primary path", 52)...)
	req = append(req, path("alternate path", 96)...)
	req = append(req,
		madField{"private data: rdma_cm header version", 140, 1}, madField{"private data: rdma_cm header IP version", 141, 1},
		madField{"private data: rdma_cm header source port", 142, 2}, madField{"private data: rdma_cm header source address", 144, 16},
		madField{"private data: rdma_cm header destination address", 160, 16},
		madField{"private data: fabric's length byte", 176, 1}, madField{"private data: user data", 177, 232 - 177})
	rep := append(append([]madField{}, ids...),
		madField{"local Q_Key", 8, 4}, madField{"local QPN", 12, 3}, madField{"ECE vendor ID 23:16", 15, 1},
		madField{"local EECN", 16, 3}, madField{"ECE vendor ID 15:8", 19, 1}, madField{"starting PSN", 20, 3},
		madField{"ECE vendor ID 7:0", 23, 1}, madField{"responder resources", 24, 1}, madField{"initiator depth", 25, 1},
		madField{"target ACK delay / failover accepted / end-to-end flow control", 26, 1},
		madField{"RNR retry count / SRQ", 27, 1}, madField{"local CA GUID", 28, 8},
		madField{"private data: fabric's length byte", 36, 1}, madField{"private data: user data", 37, 232 - 37})
	return map[mad.AttrID][]madField{
		mad.AttrREQ:  req,
		mad.AttrREP:  rep,
		mad.AttrRTU:  append(append([]madField{}, ids...), madField{"private data", 8, 224}),
		mad.AttrDREQ: append(append([]madField{}, ids...), madField{"remote QPN", 8, 3}, madField{"reserved", 11, 1}, madField{"private data", 12, 220}),
		mad.AttrDREP: append(append([]madField{}, ids...), madField{"private data", 8, 224}),
		mad.AttrMRA: append(append([]madField{}, ids...), madField{"message MRAed", 8, 1}, madField{"service timeout", 9, 1},
			madField{"private data", 10, 222}),
		mad.AttrREJ: append(append([]madField{}, ids...), madField{"message rejected", 8, 1}, madField{"reject info length", 9, 1},
			madField{"reason", 10, 2}, madField{"ARI", 12, 72}, madField{"private data", 84, 148}),
	}
}()

// madDiff describes where got differs from want, two CM MADs: each field
// whose bytes differ, with its offset in the MAD and both values (the
// differing span of a long field), then the decoded fields that differ.
func madDiff(want, got []byte) []string {
	var out []string
	fields := append([]madField{}, madHeaderFields...)
	attr := mad.MAD(want).AttributeID()
	for _, f := range cmFields[attr] {
		fields = append(fields, madField{attr.String() + " " + f.name, mad.HeaderSize + f.off, f.len})
	}
	for _, f := range fields {
		w, g := want[f.off:f.off+f.len], got[f.off:f.off+f.len]
		first, last := -1, -1
		for i := range w {
			if w[i] != g[i] {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		if first < 0 {
			continue
		}
		if f.len <= 16 {
			first, last = 0, f.len-1
		}
		out = append(out, fmt.Sprintf("%s at MAD offset %d (%d bytes): captured %x, produced %x",
			f.name, f.off+first, last-first+1, w[first:last+1], g[first:last+1]))
	}
	if mad.MAD(got).AttributeID() == attr {
		out = append(out, decodedDiff(attr, want, got)...)
	}
	return out
}

// decodedDiff compares the Fields of two CM MADs of the same type.
func decodedDiff(attr mad.AttrID, want, got []byte) []string {
	dec := func(b []byte) any {
		d := mad.MAD(b).Data()
		switch attr {
		case mad.AttrREQ:
			return mad.REQ(d).Fields()
		case mad.AttrREP:
			return mad.REP(d).Fields()
		case mad.AttrRTU:
			return mad.RTU(d).Fields()
		case mad.AttrDREQ:
			return mad.DREQ(d).Fields()
		case mad.AttrDREP:
			return mad.DREP(d).Fields()
		case mad.AttrMRA:
			return mad.MRA(d).Fields()
		case mad.AttrREJ:
			return mad.REJ(d).Fields()
		}
		return nil
	}
	var out []string
	var walk func(path string, w, g reflect.Value)
	walk = func(path string, w, g reflect.Value) {
		if w.Kind() == reflect.Struct {
			for i := range w.NumField() {
				walk(path+"."+w.Type().Field(i).Name, w.Field(i), g.Field(i))
			}
			return
		}
		if !reflect.DeepEqual(w.Interface(), g.Interface()) {
			if w.Kind() == reflect.Slice {
				out = append(out, fmt.Sprintf("decoded %s differs", path))
				return
			}
			out = append(out, fmt.Sprintf("decoded %s: captured %v, produced %v", path, w.Interface(), g.Interface()))
		}
	}
	w, g := dec(want), dec(got)
	if w == nil {
		return nil
	}
	walk(attr.String(), reflect.ValueOf(w), reflect.ValueOf(g))
	return out
}
