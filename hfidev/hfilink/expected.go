package hfilink

// Expected receive in the transport: large RDMA READ responses and the
// packets of large RDMA WRITEs go straight into the memory they are for,
// written by the chip through TIDs (RcvArray entries), and the receiving
// CPU copies nothing.
//
// The protocol is hfi1's TID RDMA in miniature, between the two ends'
// links, invisible to the RC transport above them:
//
//  1. The end that will receive the data (the requester of a READ, the
//     target of a WRITE) learns from its transport where the payload goes
//     (link.Expectation). Its link programs the buffer's pages
//     (TID_UPDATE) and sends the other end's link a grant: a tunnelled
//     packet (KDETH software dword 0 GrantMark) naming the queue pair, the
//     PSN range, the path MTU, the buffer's offset in its first page and
//     the TID entries.
//  2. The sending link, for each RC data packet of that range it sends
//     for the first time under that grant (a read asked again gets a new
//     grant for its rest), computes where its payload goes (offset
//     (PSN − first) × MTU), and when that lies within one entry, in the
//     entry's offset unit, and is whole dwords, sends it as a one-packet
//     EXPECTED SDMA request to that TID. Anything else (a packet across
//     two entries, a retransmission, no grant) goes eager as before.
//  3. The receiving chip writes the payload into the buffer and a header
//     alone into the RcvHdrQ. The receiving link finds the expectation by
//     queue pair and PSN, checks that the KDETH TID and offset are the
//     ones that PSN should use, rebuilds the frame's headers (the payload
//     bytes left out), checks the carried ICRC over headers and placed
//     payload, and hands the engine the frame with the placed payload
//     (link.Placer). The engine places it onto itself: no copy.
//  4. The receiving link frees the entries (TID_FREE) once every packet
//     of every range expected in the buffer has arrived, or the ranges
//     waited SinkLife. Expectations within a buffer programmed already
//     (many reads into one buffer) share its entries.
//
// Every step may fail or be skipped (no RcvArray entries, a lost grant, a
// lost expected packet): RC's own recovery covers it, since a packet
// retransmitted is always sent eager. A packet sent to entries already
// freed arrives with TidErr and is dropped and retransmitted.

import (
	"hash/crc32"
	"slices"
	"time"
	"unsafe"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/psn"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
)

// Expected-receive constants.
const (
	// GrantMark is KDETH software dword 0 of a grant ("SF", version 2).
	GrantMark = 0x5346_0200
	// DefaultExpectedMin is the smallest READ or WRITE whose payload the
	// link has placed by TID: below it a TID_UPDATE and a grant cost more
	// than the copies they save.
	DefaultExpectedMin = 64 << 10
	// minExpected bounds Config.ExpectedMin from below: a buffer that
	// large lives in a Go allocation of its own, which starts on a page,
	// so the page its first byte is in is still that allocation.
	minExpected = 32 << 10
	// SinkLife is how long programmed entries wait for the packets of
	// their range before they are freed. A sender forgets a grant after
	// half of it, so that it never sends into entries freed (and maybe
	// programmed again for other memory) unless a grant took longer than
	// SinkLife/2 to arrive.
	SinkLife = 2 * time.Second

	maxSinks        = 128 // ranges expected at once (a read window)
	maxMappings     = 32  // buffers programmed at once
	maxGrants       = 64
	maxGrantEntries = 256  // 1 MiB in 4 KiB pages
	maxSinkPackets  = 1024 // a grant covers at most this many packets
)

// mapping is a buffer programmed for expected receive, shared by the
// sinks within it (reads into one buffer, as a bandwidth test makes).
type mapping struct {
	m      hfidev.TIDMap // m.Buf: whole pages
	starts []int         // byte offset of each entry in m.Buf
	refs   int           // live sinks in it; freed at 0
}

// sink is an expectation the link programmed entries for (the receiving
// end): packet k of its range lands at byte off0 + k×mtu of its mapping,
// within entries [e0, e1), which its grant names.
type sink struct {
	live             bool
	lid              uint16
	qpn, first, pkts uint32
	mtu, off0        int
	e0, e1           int
	mp               *mapping
	got              [maxSinkPackets / 64]uint64
	ngot             uint32
	born             int64
}

// grant is what the other end offered (the sending end).
type grant struct {
	live             bool
	lid              uint16
	qpn, first, pkts uint32
	mtu, off0        int
	n                int
	entries          [maxGrantEntries]abi.TIDEntry
	starts           [maxGrantEntries]int32
	next             uint32 // packets before this one were sent once already
	born             int64
}

// expected is a link's expected-receive state.
type expected struct {
	min       int // smallest expectation taken; < 0: none
	sinks     [maxSinks]sink
	nsinks    int
	maps      [maxMappings]mapping
	grants    [maxGrants]grant
	ngrants   int
	lastSink  int // where the last lookup found its sink or grant
	lastGrant int
	placed    [][]byte // Placed's answers for the frames of the last Recv
	grantBuf  [maxGrantEntries * 4]byte
	flushes   uint32
	inval     []abi.TIDEntry // TID_INVAL_READ's answer
}

var (
	_ link.Expecter = (*Link)(nil)
	_ link.Placer   = (*Link)(nil)
)

// Placed reports the payload of frame i of the last Recv if the chip
// placed it in memory an expectation named (link.Placer).
func (l *Link) Placed(i int) ([]byte, bool) {
	if i < 0 || i >= len(l.exp.placed) || l.exp.placed[i] == nil {
		return nil, false
	}
	return l.exp.placed[i], true
}

// Expect programs TID entries for e's buffer, or finds them programmed
// already, and grants them to the sender (link.Expecter). It is skipped
// for small buffers and unknown peers, and when the context has no
// entries or the link no room to spare.
func (l *Link) Expect(e *link.Expectation) {
	x := &l.exp
	if x.min < 0 || len(e.Buf) < x.min || e.MTU <= 0 || e.Packets == 0 {
		return
	}
	peer := l.findAddr(l.addrBytes(&e.Peer))
	if peer == nil {
		return
	}
	now := time.Now().UnixNano()
	l.sweep(now)
	pkts := min(e.Packets, maxSinkPackets)
	total := min(len(e.Buf), int(pkts)*e.MTU)
	var free *sink
	for i := range x.sinks {
		s := &x.sinks[i]
		if !s.live {
			if free == nil {
				free = s
			}
			continue
		}
		if s.lid == peer.lid && s.qpn == e.QPN && s.first == e.PSN && s.pkts <= pkts && &s.mp.m.Buf[s.off0] == &e.Buf[0] {
			l.sendGrant(peer, e.PeerQPN, s) // asked again: the grant may have been lost
			return
		}
	}
	if free == nil {
		l.st.expectSkipped.Add(1)
		return
	}
	mp, off0 := l.mappingFor(e.Buf[:total])
	if mp == nil {
		return
	}
	// The grant names at most maxGrantEntries entries, from the one the
	// buffer starts in: the range covers the whole packets within them.
	e0 := 0
	for e0+1 < len(mp.starts) && mp.starts[e0+1] <= off0 {
		e0++
	}
	e1 := min(len(mp.m.Entries), e0+maxGrantEntries)
	covered := int(pkts)
	if avail := mp.starts[e1-1] + mp.m.Entries[e1-1].Bytes() - off0; avail < total {
		covered = avail / e.MTU
	}
	s := free
	*s = sink{live: true, lid: peer.lid, qpn: e.QPN, first: e.PSN, pkts: uint32(covered), mtu: e.MTU, off0: off0,
		e0: e0, e1: e1, mp: mp, born: now}
	mp.refs++
	x.nsinks++
	if covered == 0 || !l.sendGrant(peer, e.PeerQPN, s) {
		l.freeSink(s)
		return
	}
	l.st.expects.Add(1)
}

// mappingFor returns a mapping holding buf and buf's offset in it:
// one programmed already, or a new one of buf's pages.
func (l *Link) mappingFor(buf []byte) (*mapping, int) {
	x := &l.exp
	start := uintptr(unsafe.Pointer(&buf[0]))
	var free *mapping
	for i := range x.maps {
		mp := &x.maps[i]
		if mp.refs == 0 {
			if free == nil {
				free = mp
			}
			continue
		}
		m0 := uintptr(unsafe.Pointer(&mp.m.Buf[0]))
		if start >= m0 && start+uintptr(len(buf)) <= m0+uintptr(len(mp.m.Buf)) {
			return mp, int(start - m0)
		}
	}
	if free == nil {
		l.st.expectSkipped.Add(1)
		return nil, 0
	}
	off0 := int(start % abi.PageSize)
	pages := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&buf[0]), -off0)),
		(off0+len(buf)+abi.PageSize-1)&^(abi.PageSize-1))
	if err := l.ctx.TIDUpdateInto(pages, &free.m); err != nil {
		l.st.expectFailed.Add(1) // ENOSPC: the context's entries are all in use
		return nil, 0
	}
	free.starts = free.starts[:0]
	at := 0
	for _, t := range free.m.Entries {
		free.starts = append(free.starts, at)
		at += t.Bytes()
	}
	return free, off0
}

// addrBytes is the part of a 16-byte address findAddr compares.
func (l *Link) addrBytes(a *[16]byte) []byte {
	if l.ipv4 {
		return a[12:]
	}
	return a[:]
}

// freeSink ends a sink, and frees its mapping's entries when no other
// sink uses them.
func (l *Link) freeSink(s *sink) {
	if !s.live {
		return
	}
	s.live = false
	l.exp.nsinks--
	mp := s.mp
	s.mp = nil
	if mp.refs--; mp.refs > 0 {
		return
	}
	if err := l.ctx.TIDFree(mp.m.Entries); err != nil {
		l.fail(err)
	}
	mp.m.Buf = nil
}

// invalidated drops the buffers the driver took entries of (its MMU
// notifier saw their memory unmapped: abi.EventTIDMMUNotify): their
// ranges end, their entries are freed. Packets still on their way to
// them arrive with TidErr and are retransmitted eager.
func (l *Link) invalidated() {
	x := &l.exp
	list, err := l.ctx.TIDInvalidated(x.inval[:0])
	x.inval = list[:0]
	if err != nil {
		l.fail(err)
		return
	}
	for _, t := range list {
		for i := range x.maps {
			mp := &x.maps[i]
			if mp.refs > 0 && slices.Contains(mp.m.Entries, t) {
				l.dropMapping(mp)
			}
		}
	}
}

// dropMapping ends every sink in mp, which frees its entries.
func (l *Link) dropMapping(mp *mapping) {
	x := &l.exp
	for i := range x.sinks {
		if s := &x.sinks[i]; s.live && s.mp == mp {
			l.freeSink(s)
			l.st.sinksInvalidated.Add(1)
		}
	}
}

// sweep frees the sinks older than SinkLife and forgets the grants older
// than half of it.
func (l *Link) sweep(now int64) {
	x := &l.exp
	for i := range x.sinks {
		if s := &x.sinks[i]; s.live && now-s.born > int64(SinkLife) {
			l.freeSink(s)
			l.st.sinksExpired.Add(1)
		}
	}
	for i := range x.grants {
		if g := &x.grants[i]; g.live && now-g.born > int64(SinkLife/2) {
			g.live = false
			x.ngrants--
		}
	}
}

// maybeSweep sweeps now and then from Flush while anything is live.
func (l *Link) maybeSweep() {
	x := &l.exp
	if x.nsinks == 0 && x.ngrants == 0 {
		return
	}
	if x.flushes++; x.flushes%1024 == 0 {
		l.sweep(time.Now().UnixNano())
	}
}

// sendGrant sends s's entries to the peer's context that serves peerQPN,
// by PIO; false if the chip would not take it now.
func (l *Link) sendGrant(to *peer, peerQPN uint32, s *sink) bool {
	x := &l.exp
	entries := s.mp.m.Entries[s.e0:s.e1]
	for i, t := range entries {
		le.PutUint32(x.grantBuf[4*i:], uint32(t))
	}
	n := 4 * len(entries)
	if l.h16 {
		n = (n + 7) &^ 7 // 16B: whole quadwords (grantBuf has room); SWData[5] says how many entries
	}
	data := x.grantBuf[:n]
	t := abi.BTHKDETHFields{
		Opcode: TunnelOpcode, PKey: 0xffff,
		QP:   to.kdethQP(peerQPN),
		KVer: abi.KDETHVersion, JKey: to.jkey,
	}
	t.SWData = [7]uint32{GrantMark, s.qpn, s.first, s.pkts, uint32(s.mtu), uint32(len(entries)), uint32(s.off0 - s.mp.starts[s.e0])}
	hdr := l.encode(to, len(data), &t, uint16(s.qpn))
	pf := l.pbc(to)
	if l.sendPIO(&pf, hdr, data) != sent {
		return false
	}
	l.st.grantsSent.Add(1)
	return true
}

// takeGrant stores a grant that arrived from peer from, in place of the
// oldest when the table is full.
func (l *Link) takeGrant(p *hfidev.Packet, from *peer) {
	h := p.BTHKDETH()
	n, mtu, off0, pkts := int(h.SWData(5)), int(h.SWData(4)), int(h.SWData(6)), h.SWData(3)
	if n == 0 || n > maxGrantEntries || len(p.Payload) < 4*n || mtu == 0 || mtu > 1<<13 ||
		off0 > abi.TIDMaxBuffer*maxGrantEntries || pkts == 0 || pkts > maxSinkPackets {
		l.st.rxForeign.Add(1)
		return
	}
	qpn, first := h.SWData(1), h.SWData(2)
	x := &l.exp
	var g, free, old *grant
	for i := range x.grants {
		c := &x.grants[i]
		switch {
		case c.live && c.lid == from.lid && c.qpn == qpn && c.first == first:
			g = c // the same again
		case !c.live && free == nil:
			free = c
		case c.live && (old == nil || c.born < old.born):
			old = c
		}
	}
	if g == nil {
		g = free
	}
	if g == nil {
		g = old
	}
	if !g.live {
		x.ngrants++
	}
	// The same grant again means the range was asked for again (a READ
	// repeated whole) and is live: its packets may all go expected again.
	*g = grant{live: true, lid: from.lid, qpn: qpn, first: first, pkts: pkts, mtu: mtu, off0: off0, n: n,
		born: time.Now().UnixNano()}
	at := 0
	for i := range n {
		g.entries[i] = abi.TIDEntry(le.Uint32(p.Payload[4*i:]))
		g.starts[i] = int32(at)
		at += g.entries[i].Bytes()
	}
	l.st.grantsRcvd.Add(1)
}

// carriesPayload reports whether op is an RC data packet a grant may
// cover: the packets of a send or write after its first, and read
// responses.
func carriesPayload(op wire.Opcode) bool {
	switch op {
	case wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastImm, wire.RCSendLastInv,
		wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteLastImm,
		wire.RCReadResponseFirst, wire.RCReadResponseMiddle, wire.RCReadResponseLast, wire.RCReadResponseOnly:
		return true
	}
	return false
}

// entryAt finds the entry of a list holding [off, off+n): its index and
// off's offset in it, if the range fits in it at its offset unit.
func entryAt[S int | int32](entries []abi.TIDEntry, starts []S, off, n int) (int, int, bool) {
	for i, t := range entries {
		at := int(starts[i])
		if off < at || off >= at+t.Bytes() {
			continue
		}
		in := off - at
		return i, in, in+n <= t.Bytes() && in%t.OMUnit() == 0 && in/t.OMUnit() <= 0x7fff
	}
	return 0, 0, false
}

// sendExpected sends p (in buffer b, towards to) straight into the
// receiver's memory when a grant covers it and this is the packet's first
// transmission; ok is false when it should go eager.
func (l *Link) sendExpected(p *wire.Packet, to *peer, b int32) (outcome, bool) {
	bth := p.BTH()
	qpn, ps := bth.DestQP(), psn.PSN(bth.PSN())
	x := &l.exp
	for j := range x.grants {
		i := (x.lastGrant + j) % maxGrants
		g := &x.grants[i]
		if !g.live || g.lid != to.lid || g.qpn != qpn {
			continue
		}
		k := uint32(ps.Diff(psn.PSN(g.first)))
		if k >= g.pkts {
			continue
		}
		if k < g.next {
			continue // sent under this grant before: a newer grant may cover it (a read asked again)
		}
		x.lastGrant = i
		g.next = k + 1
		data := p.Payload
		n := len(data)
		if n == 0 || n%4 != 0 || p.Info.HeaderLen-wire.BTHSize > 4 || bth.PadCount() != 0 {
			return 0, false
		}
		idx, in, ok := entryAt(g.entries[:g.n], g.starts[:g.n], g.off0+int(k)*g.mtu, n)
		if !ok || (l.h16 && (n%abi.FlitSize != 0 || in%abi.FlitSize != 0)) {
			return 0, false // 16B: only whole quadwords at a quadword offset are placed
		}
		var ext uint32
		if el := p.Info.HeaderLen - wire.BTHSize; el == 4 {
			ext = be.Uint32(p.Frame[p.BTHOff+wire.BTHSize:])
		}
		hdr := l.header(p, to, n, 0)
		l.tr().SetSWData(4, ext)
		pf := l.pbc(to)
		l.one[0] = data
		o := l.submit(pf.Encode(l.chip), hdr, fragFor(n), l.one[:], g.entries[idx:g.n], in, b)
		l.one[0] = nil
		if o != held {
			g.next = k // not sent: the next try may be expected again
			return o, true
		}
		l.st.txExpected.Add(1)
		return held, true
	}
	return 0, false
}

// rebuildPlaced rebuilds the frame of an expected packet from from into
// buf, its payload left out, and returns its length and the payload where
// the chip placed it; 0 when it is dropped.
func (l *Link) rebuildPlaced(p *hfidev.Packet, from *peer, buf []byte) (int, []byte) {
	h := p.BTHKDETH()
	mark := h.SWData(0)
	op := wire.Opcode(mark)
	qpn, ps := h.SWData(1), psn.PSN(h.PSN()&psn.Mask)
	// The payload's length by the LRH: 9B in dwords with the ICRC, 16B in
	// flits with the tail quadword (placed 16B packets are not padded).
	var n int
	if p.Header16B != nil {
		n = int(p.Header16B.PktLen())*abi.FlitSize - abi.Header16BSize - abi.Tail16BSize
	} else {
		n = int(p.Header.PktLen())*4 - abi.Header9BSize - abi.ICRCSize
	}
	s, k := l.findSink(from.lid, qpn, ps)
	info := op.Info()
	if s == nil || info == nil || !carriesPayload(op) || n <= 0 {
		l.st.rxUnplaced.Add(1)
		return 0, nil
	}
	off := s.off0 + int(k)*s.mtu
	m := &s.mp.m
	idx, in, ok := entryAt(m.Entries, s.mp.starts, off, n)
	if t := m.Entries[idx]; !ok || h.TID() != t.Pair() || h.TIDCtrl() != t.Ctrl() || h.TIDOffset() != in ||
		off+n > len(m.Buf) {
		l.st.rxUnplaced.Add(1)
		return 0, nil
	}
	view := m.Buf[off : off+n : off+n]
	hl := from.rx.HeaderLen()
	ext := info.HeaderLen - wire.BTHSize
	size := hl + wire.BTHSize + ext + n + wire.ICRCSize
	if size > len(buf) || ext > 4 {
		l.st.rxTooLarge.Add(1)
		return 0, nil
	}
	frame := buf[:size]
	if ext == 4 {
		be.PutUint32(frame[hl+wire.BTHSize:], h.SWData(4))
	}
	if !frameHeaders(frame, p, h, from) {
		l.st.rxTooLarge.Add(1)
		return 0, nil
	}
	crc := crc32.Update(wire.ComputeICRC(frame[wire.EthernetSize:hl+wire.BTHSize+ext]), crc32.IEEETable, view)
	if crc != h.SWData(3) {
		l.st.rxBadPlaced.Add(1)
		return 0, nil
	}
	l.gotPacket(s, k, op)
	l.st.rxPlaced.Add(1)
	return size, view
}

// findSink is the live sink of queue pair qpn from LID lid whose range
// holds PSN ps, and ps's index in it.
func (l *Link) findSink(lid uint16, qpn uint32, ps psn.PSN) (*sink, uint32) {
	x := &l.exp
	for j := range x.sinks {
		i := (x.lastSink + j) % maxSinks
		s := &x.sinks[i]
		if !s.live || s.lid != lid || s.qpn != qpn {
			continue
		}
		if k := uint32(ps.Diff(psn.PSN(s.first))); k < s.pkts {
			x.lastSink = i
			return s, k
		}
	}
	return nil, 0
}

// gotPacket marks packet k of s arrived (placed or eager), and frees s's
// entries once all have. A packet that ends its message (a send's may
// end before the receive buffer does) ends the range there.
func (l *Link) gotPacket(s *sink, k uint32, op wire.Opcode) {
	if s.got[k/64]&(1<<(k%64)) == 0 {
		s.got[k/64] |= 1 << (k % 64)
		s.ngot++
	}
	if info := op.Info(); info != nil && info.Mask&wire.MaskLast != 0 && k+1 < s.pkts {
		s.pkts = k + 1
		s.ngot = 0
		for i := range s.pkts {
			s.ngot += uint32(s.got[i/64] >> (i % 64) & 1)
		}
	}
	if s.ngot == s.pkts {
		l.freeSink(s)
	}
}

// sawEager marks an eager data packet of a sink's range arrived.
func (l *Link) sawEager(from *peer, h abi.BTHKDETH) {
	op := wire.Opcode(h.SWData(0))
	if l.exp.nsinks == 0 || !carriesPayload(op) {
		return
	}
	if s, k := l.findSink(from.lid, h.SWData(1), psn.PSN(h.PSN()&psn.Mask)); s != nil {
		l.gotPacket(s, k, op)
	}
}
