package daemon

import (
	"encoding/binary"
	"testing"

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
		{"SIDR_REP", a, cmMAD(mad.AttrSIDRREP, 3<<16|1, 0, 0), false},
		{"not a user", &app{id: 6}, cmMAD(mad.AttrREQ, 6<<16|1, 0, 1), false},
		{"not CM", a, notCM, false},
	} {
		if got := r.mayPostMAD(c.a, c.m); got != c.want {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.want)
		}
	}
}
