package daemon

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
)

// cmMAD builds a CM MAD of kind attr whose data starts with the given
// 32-bit words, and carries service at the REQ's service ID.
func cmMAD(attr mad.AttrID, local, remote uint32, service uint64) []byte {
	m := mad.MAD(make([]byte, mad.Size))
	h := mad.CMHeader(attr, 7)
	m.EncodeHeader(&h)
	d := m.Data()
	binary.BigEndian.PutUint32(d[0:], local)
	binary.BigEndian.PutUint32(d[4:], remote)
	if attr == mad.AttrREQ || attr == mad.AttrSIDRREQ {
		binary.BigEndian.PutUint64(d[8:], service)
	}
	return m
}

// rejREQ is a REJ of a REQ with no local comm ID.
func rejREQ() []byte {
	m := cmMAD(mad.AttrREJ, 0, 9, 0)
	mad.REJ(mad.MAD(m).Data()).Encode(&mad.REJFields{RemoteCommID: 9, MessageRejected: mad.MsgREQ, Reason: mad.RejectInvalidServiceID})
	return m
}

// sidrREP is a SIDR_REP answering request ID id.
func sidrREP(id uint32, st mad.SIDRStatus, service uint64) []byte {
	m := cmMAD(mad.AttrSIDRREP, 0, 0, 0)
	mad.SIDRREP(mad.MAD(m).Data()).Encode(&mad.SIDRREPFields{RequestID: id, Status: st, QPN: 0x99, ServiceID: service})
	return m
}

// prefixRand draws numbers whose bits 16–31 are an application's prefix,
// as fabric's connection manager does with device.ServiceRegistrar's.
type prefixRand struct {
	prefix uint32
	n      uint64
}

func (p *prefixRand) Uint64() uint64 {
	p.n = p.n*6364136223846793005 + 1442695040888963407
	return p.n&^0xffff0000 | uint64(p.prefix)<<16
}

// TestSIDRRoundTrip: an application's SIDR_REQ (its agent's request ID
// carrying its prefix) may leave; the peer's SIDR_REP, and a refusal
// from a peer with no listener, come back to it; a listener's answer to
// a SIDR_REQ may leave, and the requester's duplicates reach the listener.
func TestSIDRRoundTrip(t *testing.T) {
	a, b := &app{id: 3}, &app{id: 0x10005}
	service := mad.ServiceID(mad.PortSpaceUDP, 7174)
	r := &cmRoutes{users: map[uint32]*app{3: a, 5: b}, services: map[uint64]*app{service: b}, first: a}
	var sent [][]byte
	ag := ibcm.New(ibcm.Config{Rand: &prefixRand{prefix: CommIDPrefix(a.id)}, Send: func(_ ibcm.Peer, m []byte) {
		sent = append(sent, bytes.Clone(m))
	}})
	var gid [16]byte
	gid[15] = 1
	if _, err := ag.ResolveSIDR(0, ibcm.SIDRParams{ServiceID: service, RemoteGID: gid}); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || !r.mayPostMAD(a, sent[0]) || r.mayPostMAD(b, sent[0]) {
		t.Fatalf("SIDR_REQ: %d sent, or posted by the wrong application", len(sent))
	}
	if got := r.routeMAD(sent[0]); got != b {
		t.Errorf("SIDR_REQ routed to %v, want the listener", got)
	}
	for _, st := range []mad.SIDRStatus{mad.SIDRSuccess, mad.SIDRUnsupported} {
		rep := make([]byte, mad.Size)
		ibcm.FormatIssuedSIDRREP(rep, mad.MAD(sent[0]), st)
		if got := r.routeMAD(rep); got != a {
			t.Errorf("SIDR_REP (status %d) routed to %v, want the requester", st, got)
		}
	}
	// The listener's agent answers.
	var answered [][]byte
	var ev ibcm.Event
	lb := ibcm.New(ibcm.Config{Rand: &prefixRand{prefix: CommIDPrefix(b.id)}, Send: func(_ ibcm.Peer, m []byte) {
		answered = append(answered, bytes.Clone(m))
	}, Event: func(e ibcm.Event) { ev = e }})
	lb.Listen(service, 0)
	lb.Receive(0, ibcm.Peer{GID: gid}, sent[0])
	if ev.Type != ibcm.EventSIDRRequest {
		t.Fatalf("listener event %v", ev.Type)
	}
	if err := lb.SIDRReply(0, ev.ID, ibcm.SIDRReplyParams{QPN: 0x99, QKey: 0x01234567}); err != nil {
		t.Fatal(err)
	}
	if len(answered) != 1 || !r.mayPostMAD(b, answered[0]) || r.mayPostMAD(a, answered[0]) {
		t.Fatal("the listener's SIDR_REP may not leave, or another's may")
	}
	if got := r.routeMAD(answered[0]); got != a {
		t.Errorf("the listener's SIDR_REP routed to %v", got)
	}
}

func TestRouteMAD(t *testing.T) {
	a, b := &app{id: 3}, &app{id: 0x10005}
	r := &cmRoutes{users: map[uint32]*app{3: a, 5: b}, services: map[uint64]*app{0x1060000 + 7174: b}, first: a}
	short := cmMAD(mad.AttrREP, 1, 5<<16|9, 0)[:mad.Size-1]
	notCM := cmMAD(mad.AttrREP, 1, 5<<16|9, 0)
	notCM[1] = 0x04
	for _, c := range []struct {
		name string
		m    []byte
		want *app
	}{
		{"REQ to a listened service", cmMAD(mad.AttrREQ, 77, 0, 0x1060000+7174), b},
		{"REQ to no listener: the first user rejects it", cmMAD(mad.AttrREQ, 77, 0, 0x1060000+1), a},
		{"SIDR_REQ to a listened service", cmMAD(mad.AttrSIDRREQ, 77, 0, 0x1060000+7174), b},
		{"REP by remote comm ID", cmMAD(mad.AttrREP, 1, 5<<16|9, 0), b},
		{"DREQ by remote comm ID", cmMAD(mad.AttrDREQ, 1, 3<<16|9, 0), a},
		{"RTU for nobody", cmMAD(mad.AttrRTU, 1, 4<<16|9, 0), nil},
		{"SIDR_REP by request ID", cmMAD(mad.AttrSIDRREP, 3<<16|1, 0, 0), a},
		{"short", short, nil},
		{"not CM", notCM, nil},
	} {
		if got := r.routeMAD(c.m); got != c.want {
			t.Errorf("%s: routed to %v, want %v", c.name, got, c.want)
		}
	}
	if (*cmRoutes)(nil).routeMAD(cmMAD(mad.AttrREQ, 1, 0, 1)) != nil {
		t.Error("no routes: routed")
	}
	for _, c := range []struct {
		name string
		a    *app
		m    []byte
		want bool
	}{
		{"own REQ", a, cmMAD(mad.AttrREQ, 3<<16|1, 0, 1), true},
		{"own DREP", b, cmMAD(mad.AttrDREP, 5<<16|1, 9, 0), true},
		{"another's comm ID", a, cmMAD(mad.AttrDREQ, 5<<16|1, 9, 0), false},
		{"comm ID 0", a, cmMAD(mad.AttrDREQ, 0, 9, 0), false},
		{"REJ of a REQ, comm ID 0", a, rejREQ(), true},
		{"SIDR_REP for another's service", a, sidrREP(5<<16|1, mad.SIDRSuccess, 0x1060000+7174), false},
		{"SIDR_REP for its own service", b, sidrREP(3<<16|1, mad.SIDRSuccess, 0x1060000+7174), true},
		{"SIDR_REP refusing any service", a, sidrREP(5<<16|1, mad.SIDRUnsupported, 0x1060000+7174), true},
		{"own SIDR_REQ", a, cmMAD(mad.AttrSIDRREQ, 3<<16|1, 0, 1), true},
		{"SIDR_REQ with another's request ID", a, cmMAD(mad.AttrSIDRREQ, 5<<16|1, 0, 1), false},
		{"not a user", &app{id: 6}, cmMAD(mad.AttrREQ, 6<<16|1, 0, 1), false},
		{"not CM", a, notCM, false},
	} {
		if got := r.mayPostMAD(c.a, c.m); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.want)
		}
	}
}
