package daemon

import (
	"encoding/binary"
	"fmt"
	"maps"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/ibcm"
	"github.com/softfabric/softfabric/dataplane/mad"
	"github.com/softfabric/softfabric/dataplane/wire"
)

// Queue pair 1, the General Services Interface, belongs to every
// application that speaks RDMA-CM: each runs its own connection manager
// (dataplane/ibcm) behind its own QP1, and the daemon routes the CM MADs
// that arrive to the right one, as the kernel's MAD layer routes them to
// its agents:
//
//   - a REQ (or SIDR_REQ) to the application listening on its service ID
//     (daemonapi.OpListen), or, when none listens, to the first CM
//     application, whose CM rejects it (Invalid Service ID; SIDR_REP
//     status Unsupported) as rdma_cm peers expect; with no CM application
//     at all, the daemon answers so itself;
//   - every other CM message carries the receiver's communication ID
//     (REP, REJ, MRA, RTU, DREQ, DREP: the Remote Comm ID; SIDR_REP: the
//     Request ID, which an agent draws like its comm IDs), and an
//     application's IDs carry its number in their top 16 bits
//     (CommIDPrefix), so the ID names the application.
//
// An application may send a CM MAD from QP1 only with a communication ID
// of its own (its Local Comm ID, or a SIDR_REQ's Request ID): it cannot
// answer or disconnect another application's connections. A SIDR_REP
// carries the requester's ID, not the sender's: an application may send
// one for a service it listens on, or a refusal (any status but success)
// for any. The other exception is the REJ of a REQ that made no
// connection, which has no local ID. So an application could refuse a
// request another one was sent, by its ID (a denial of service on the
// same host, not a way in), but cannot hand out another's service.

// CommIDPrefix is the top 16 bits of the communication IDs of the
// application with number id.
func CommIDPrefix(id uint32) uint32 { return id & 0xffff }

// cmRoutes is a snapshot of who speaks RDMA-CM, for the workers (copy on
// write under Daemon.mu).
type cmRoutes struct {
	users    map[uint32]*app // by communication-ID prefix
	services map[uint64]*app
	first    *app // the lowest-numbered user: rejects unknown services
}

// routeMAD is the application that MAD m (a UD payload to QP1) is for,
// nil when none.
func (r *cmRoutes) routeMAD(m []byte) *app {
	v := mad.MAD(m)
	if r == nil || !v.IsValid() || v.MgmtClass() != mad.ClassCM {
		return nil
	}
	data := v.Data()
	var service uint64
	switch v.AttributeID() {
	case mad.AttrREQ:
		service = mad.REQ(data).ServiceID()
	case mad.AttrSIDRREQ:
		service = mad.SIDRREQ(data).ServiceID()
	case mad.AttrSIDRREP:
		return r.users[mad.SIDRREP(data).RequestID()>>16]
	default:
		// REP, REJ, MRA, RTU, DREQ, DREP, LAP, APR: the receiver's ID is
		// the second word of each.
		return r.users[binary.BigEndian.Uint32(data[4:])>>16]
	}
	if a := r.services[service]; a != nil {
		return a
	}
	return r.first
}

// mayPostMAD reports whether application a may send MAD m from QP1.
func (r *cmRoutes) mayPostMAD(a *app, m []byte) bool {
	v := mad.MAD(m)
	if r == nil || !v.IsValid() || v.MgmtClass() != mad.ClassCM || r.users[CommIDPrefix(a.id)] != a {
		return false
	}
	if v.AttributeID() == mad.AttrSIDRREP {
		rep := mad.SIDRREP(v.Data())
		return rep.Status() != mad.SIDRSuccess || r.services[rep.ServiceID()] == a
	}
	local := binary.BigEndian.Uint32(v.Data()[0:])
	if local>>16 == CommIDPrefix(a.id) {
		return true
	}
	// A REJ of a REQ that made no connection (unknown service, stale
	// connection) carries no local ID, as the kernel's cm_issue_rej.
	return v.AttributeID() == mad.AttrREJ && local == 0 && mad.REJ(v.Data()).MessageRejected() == mad.MsgREQ
}

// cmOp registers a as an RDMA-CM user (SetQP 1), unregisters it (DeleteQP
// 1), or has it listen on a service ID or stop (d.mu held).
func (d *Daemon) cmOp(a *app, req daemonapi.Request) error {
	cur := d.cm.Load()
	next := &cmRoutes{users: map[uint32]*app{}, services: map[uint64]*app{}}
	if cur != nil {
		next.users, next.services = maps.Clone(cur.users), maps.Clone(cur.services)
	}
	user := next.users[CommIDPrefix(a.id)] == a
	switch req.Op {
	case daemonapi.OpSetQP:
		if o := next.users[CommIDPrefix(a.id)]; o != nil && o != a {
			return fmt.Errorf("%w: communication-ID prefix %#x belongs to application %d", daemonapi.ErrQPNInUse, CommIDPrefix(a.id), o.id)
		}
		next.users[CommIDPrefix(a.id)] = a
	case daemonapi.OpDeleteQP:
		if !user {
			return fmt.Errorf("%w: not an RDMA-CM user", daemonapi.ErrInvalid)
		}
		d.dropCM(a, next)
	case daemonapi.OpListen:
		if !user {
			return fmt.Errorf("%w: listening needs QP1 (set_qp 1) first", daemonapi.ErrInvalid)
		}
		if o := next.services[req.Service]; o != nil && o != a {
			return fmt.Errorf("%w: service %#x has a listener (application %d)", daemonapi.ErrQPNInUse, req.Service, o.id)
		}
		next.services[req.Service] = a
	case daemonapi.OpUnlisten:
		if next.services[req.Service] != a {
			return fmt.Errorf("%w: service %#x is not this application's", daemonapi.ErrInvalid, req.Service)
		}
		delete(next.services, req.Service)
	default:
		return fmt.Errorf("%w: %s on QP1", daemonapi.ErrInvalid, req.Op)
	}
	next.first = nil
	for _, u := range next.users {
		if next.first == nil || u.id < next.first.id {
			next.first = u
		}
	}
	d.cm.Store(next)
	return nil
}

// dropCM removes a and its services from next.
func (d *Daemon) dropCM(a *app, next *cmRoutes) {
	delete(next.users, CommIDPrefix(a.id))
	maps.DeleteFunc(next.services, func(_ uint64, o *app) bool { return o == a })
}

// answerUnrouted answers a REQ, SIDR_REQ or DREQ that no application
// takes as the kernel's CM answers them. A request for a service nobody
// listens on (none speaks RDMA-CM) gets REJ Invalid Service ID
// (cm_issue_rej) or SIDR_REP status Unsupported (cm_reject_sidr_req), and
// rdma_cm peers see RDMA_CM_EVENT_REJECTED, status 8, or
// RDMA_CM_EVENT_UNREACHABLE at once. A DREQ for a connection whose
// application is gone gets a DREP (cm_issue_drep): its DREP was lost, the
// application exited, and the peer would send its DREQ again until its
// own timeout (an rdma_cm server waiting for DISCONNECTED meanwhile). p is
// the parsed message; the answer goes back the way it came. It runs on
// the worker, rarely: an answer per message, as the kernel sends.
func (w *worker) answerUnrouted(p *wire.Packet) {
	m := mad.MAD(p.Payload)
	if !m.IsValid() || m.MgmtClass() != mad.ClassCM {
		return
	}
	switch m.AttributeID() {
	case mad.AttrREQ, mad.AttrSIDRREQ, mad.AttrDREQ:
	default:
		return
	}
	path, err := wire.NewPath(wire.PathFields{SrcMAC: w.d.mac, DstMAC: p.Ethernet().Src(), Src: p.Dst().Unmap(),
		Dst: p.Src().Unmap(), SrcPort: wire.SourcePort(engine.GSIQPN, engine.GSIQPN)})
	if err != nil {
		return
	}
	buf := w.sock.TxBuf()
	if buf == nil {
		return // the requester sends its REQ again
	}
	hl, info := path.HeaderLen(), wire.UDSendOnly.Info()
	f := buf[:hl+info.HeaderLen+mad.Size+wire.ICRCSize]
	wire.BTH(f[hl:]).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: engine.GSIQPN, PSN: uint32(w.gsiPSN)})
	w.gsiPSN = w.gsiPSN.Next()
	wire.DETH(f[hl+info.DETH:]).Encode(mad.GSIQKey, engine.GSIQPN)
	out := f[hl+info.HeaderLen : hl+info.HeaderLen+mad.Size]
	clear(out)
	switch m.AttributeID() {
	case mad.AttrSIDRREQ:
		ibcm.FormatIssuedSIDRREP(out, m, mad.SIDRUnsupported)
		w.c.rejected.Add(1)
	case mad.AttrDREQ:
		ibcm.FormatIssuedDREP(out, m)
	default:
		ibcm.FormatIssuedREJ(out, m, mad.RejectInvalidServiceID, mad.MsgREQ)
		w.c.rejected.Add(1)
	}
	path.Finish(f)
	if err := w.lpkt.Parse(f); err == nil && w.local(&w.lpkt) {
		// The request came from an application on this device.
		w.loopBack(&w.lpkt, f)
		w.sock.TxSubmit(0)
		return
	}
	w.sock.TxSubmit(len(f))
	w.c.tx.Add(1)
}

// detachCM forgets a detaching application's RDMA-CM state (d.mu held).
func (d *Daemon) detachCM(a *app) {
	cur := d.cm.Load()
	if cur == nil || cur.users[CommIDPrefix(a.id)] != a {
		return
	}
	_ = d.cmOp(a, daemonapi.Request{Op: daemonapi.OpDeleteQP, QPN: engine.GSIQPN})
}
