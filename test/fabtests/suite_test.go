package fabtests

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// The RDM suite: a server that echoes (manual progress) and a client
// that runs fabtests' functional tests against it over the real path:
// cq_data, inject_test, unexpected_msg, rdm_tagged_peek, recv_cancel,
// multi_recv, multi_mr, av_xfer, flood and rdm_atomic -o all.
const (
	suiteService = 7474
	slotSize     = 16 << 10
	echoSlots    = 256
	extraMRs     = 8
	tagHello     = 1 << 40
	tagDone      = 1<<40 + 1
	tagFlood     = 1<<40 + 2
	tagReport    = 1<<40 + 3
	floodCount   = 2000
)

func suiteServer(self string) error {
	s, err := open(self, fabric.EPRDM, fabric.ProgressManual, suiteService)
	if err != nil {
		return err
	}
	ep, err := s.endpoint(&s.info)
	if err != nil {
		return err
	}
	echo, err := s.dom.RegisterMemory(make([]byte, echoSlots*slotSize), 0)
	if err != nil {
		return err
	}
	dir := make([]byte, 0, 16*(extraMRs+1))
	dir = binary.LittleEndian.AppendUint64(dir, s.mr.Addr())
	dir = binary.LittleEndian.AppendUint64(dir, s.mr.Key())
	for i := 0; i < extraMRs; i++ {
		m, err := s.dom.RegisterMemory(make([]byte, 64<<10), fabric.AccessRemoteRead|fabric.AccessRemoteWrite)
		if err != nil {
			return err
		}
		dir = binary.LittleEndian.AppendUint64(dir, m.Addr())
		dir = binary.LittleEndian.AppendUint64(dir, m.Key())
	}
	// Receives: tagged and untagged, in the first 1 MiB of s.mr (the
	// rest is the client's RMA and atomic target).
	buf := s.mr.Bytes()
	repost := func(slot uint64) error {
		b := buf[slot*slotSize : (slot+1)*slotSize]
		if slot < 32 {
			return s.post(func() error { return ep.TRecv(b, s.mr.Desc(), fabric.AddrUnspec, 0, ^uint64(0), slot) })
		}
		return s.post(func() error { return ep.Recv(b, s.mr.Desc(), fabric.AddrUnspec, slot) })
	}
	for slot := uint64(0); slot < 64; slot++ {
		if err := repost(slot); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	peer := fabric.AddrUnspec
	echoed, flood, floodNext := 0, 0, uint64(0)
	for {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c.Flags&fabric.FlagRecv == 0 {
			continue
		}
		tagged := c.Flags&fabric.FlagTagged != 0
		if peer != fabric.AddrUnspec && c.Src != peer {
			return fmt.Errorf("message from %d, the client is %d", c.Src, peer)
		}
		reply := append(echo.Bytes()[echoed%echoSlots*slotSize:echoed%echoSlots*slotSize], c.Buf...)
		switch {
		case tagged && c.Tag == tagHello:
			if peer, err = s.av.InsertString(string(c.Buf)); err != nil {
				return err
			}
			reply = append(reply[:0], dir...)
		case tagged && c.Tag == tagDone:
			return ep.Close()
		case tagged && c.Tag == tagFlood:
			// In order, exactly once.
			if seq := binary.LittleEndian.Uint64(c.Buf); seq != floodNext {
				return fmt.Errorf("flood: message %d after %d", seq, floodNext)
			}
			floodNext++
			flood++
			if err := repost(c.Context); err != nil {
				return err
			}
			continue
		case tagged && c.Tag == tagReport:
			reply = binary.LittleEndian.AppendUint64(reply[:0], uint64(flood))
		}
		if err := repost(c.Context); err != nil {
			return err
		}
		var send func() error
		switch {
		case tagged && c.Flags&fabric.FlagRemoteCQData != 0:
			send = func() error { return ep.TSendData(reply, echo.Desc(), c.Data, peer, c.Tag, 1) }
		case tagged:
			send = func() error { return ep.TSend(reply, echo.Desc(), peer, c.Tag, 1) }
		case c.Flags&fabric.FlagRemoteCQData != 0:
			send = func() error { return ep.SendData(reply, echo.Desc(), c.Data, peer, 1) }
		default:
			send = func() error { return ep.Send(reply, echo.Desc(), peer, 1) }
		}
		if err := s.post(send); err != nil {
			return err
		}
		echoed++
	}
}

// client is the suite's client side.
type client struct {
	*side
	ep      *fabric.Endpoint
	srv     fabric.Addr
	srvIP   netip.Addr
	dir     [extraMRs + 1][2]uint64 // addr, key of the server's regions
	pending []fabric.Completion     // receives read while waiting for others
}

// wait returns the next completion with context ctx (others are kept).
func (c *client) wait(ctx uint64) (fabric.Completion, error) {
	for i, p := range c.pending {
		if p.Context == ctx {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return p, p.Err()
		}
	}
	for {
		x, err := c.next()
		if err != nil {
			return x, err
		}
		if x.Context == ctx {
			return x, nil
		}
		c.pending = append(c.pending, x)
	}
}

func suiteClient(self, peer string) error {
	s, err := open(self, fabric.EPRDM, fabric.ProgressAuto, 0)
	if err != nil {
		return err
	}
	info := s.info
	ep, err := s.endpoint(&info)
	if err != nil {
		return err
	}
	c := &client{side: s, ep: ep, srvIP: netip.MustParseAddr(peer)}
	if c.srv, err = s.av.InsertService(c.srvIP, suiteService); err != nil {
		return err
	}
	steps := []struct {
		name string
		f    func() error
	}{
		{"hello", c.hello}, {"cq_data", c.cqData}, {"inject_test", c.inject}, {"unexpected_msg+rdm_tagged_peek", c.peek},
		{"recv_cancel", c.cancel}, {"multi_recv", c.multiRecv}, {"multi_mr", c.multiMR}, {"av_xfer", c.avXfer},
		{"flood", c.flood}, {"rdm_atomic", c.atomics},
	}
	for _, st := range steps {
		if err := st.f(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	if err := ep.TSend(nil, fabric.Desc{}, c.srv, tagDone, 999); err != nil {
		return err
	}
	_, err = c.wait(999)
	return err
}

// roundTrip sends b (tagged or not, with data or not) and checks its echo.
func (c *client) roundTrip(b []byte, tagged bool, tag uint64, data *uint64, ctx uint64) error {
	rbuf := c.mr.Bytes()[1<<20 : 1<<20+slotSize]
	var err error
	if tagged {
		err = c.ep.TRecv(rbuf, c.mr.Desc(), c.srv, tag, 0, ctx)
	} else {
		err = c.ep.Recv(rbuf, c.mr.Desc(), c.srv, ctx)
	}
	if err != nil {
		return err
	}
	switch {
	case tagged && data != nil:
		err = c.ep.TSendData(b, c.mr.Desc(), *data, c.srv, tag, ctx+1)
	case tagged:
		err = c.ep.TSend(b, c.mr.Desc(), c.srv, tag, ctx+1)
	case data != nil:
		err = c.ep.SendData(b, c.mr.Desc(), *data, c.srv, ctx+1)
	default:
		err = c.ep.Send(b, c.mr.Desc(), c.srv, ctx+1)
	}
	if err != nil {
		return err
	}
	if _, err := c.wait(ctx + 1); err != nil {
		return err
	}
	r, err := c.wait(ctx)
	if err != nil {
		return err
	}
	if !bytes.Equal(r.Buf, b) || r.Src != c.srv || (tagged && r.Tag != tag) {
		return fmt.Errorf("echo of %d bytes: %d bytes, tag %#x, from %d", len(b), r.Len, r.Tag, r.Src)
	}
	if data != nil && (r.Flags&fabric.FlagRemoteCQData == 0 || r.Data != *data) {
		return fmt.Errorf("echo lost its remote CQ data: %+v", r)
	}
	return nil
}

func (c *client) hello() error {
	name := append(c.mr.Bytes()[:0:64], c.ep.Name().String()...)
	rbuf := c.mr.Bytes()[1<<20 : 1<<20+slotSize]
	if err := c.ep.TRecv(rbuf, c.mr.Desc(), c.srv, tagHello, 0, 1); err != nil {
		return err
	}
	if err := c.ep.TSend(name, c.mr.Desc(), c.srv, tagHello, 2); err != nil {
		return err
	}
	if _, err := c.wait(2); err != nil {
		return err
	}
	r, err := c.wait(1)
	if err != nil {
		return err
	}
	if r.Len != 16*(extraMRs+1) {
		return fmt.Errorf("directory of %d bytes", r.Len)
	}
	for i := range c.dir {
		c.dir[i] = [2]uint64{binary.LittleEndian.Uint64(r.Buf[16*i:]), binary.LittleEndian.Uint64(r.Buf[16*i+8:])}
	}
	return nil
}

func (c *client) cqData() error {
	b := c.mr.Bytes()[64:128]
	for i := uint64(0); i < 8; i++ {
		data := 0xabc0 + i
		if err := c.roundTrip(pattern(b, int(i)), i%2 == 0, 0x500+i, &data, 10); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) inject() error {
	b := pattern(c.mr.Bytes()[128:160], 3)
	want := bytes.Clone(b)
	rbuf := c.mr.Bytes()[1<<20 : 1<<20+slotSize]
	if err := c.ep.TRecv(rbuf, c.mr.Desc(), c.srv, 0x600, 0, 20); err != nil {
		return err
	}
	if err := c.ep.TInject(b, c.srv, 0x600); err != nil {
		return err
	}
	clear(b) // reusable at once
	r, err := c.wait(20)
	if err != nil {
		return err
	}
	if !bytes.Equal(r.Buf, want) {
		return errors.New("the echo of an injected message differs")
	}
	return nil
}

// peek sends five tagged messages whose echoes arrive before any receive
// is posted, then takes them by peek, claim, discard and tag.
func (c *client) peek() error {
	b := c.mr.Bytes()[256:261]
	for i := 0; i < 5; i++ {
		b[i] = byte('v' + i)
		if err := c.ep.TSend(b[i:i+1], c.mr.Desc(), c.srv, uint64(0x700+i), uint64(30+i)); err != nil {
			return err
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := c.wait(uint64(30 + i)); err != nil {
			return err
		}
	}
	time.Sleep(100 * time.Millisecond) // the echoes arrive unexpected
	m := fabric.Msg{Addr: c.srv, Tag: 0x702, Context: 40}
	if err := c.ep.TRecvMsg(&m, fabric.FlagPeek); err != nil {
		return err
	}
	if r, err := c.wait(40); err != nil || r.Tag != 0x702 || r.Len != 1 {
		return fmt.Errorf("peek: %+v %v", r, err)
	}
	m = fabric.Msg{Addr: c.srv, Tag: 0x703, Context: 41}
	if err := c.ep.TRecvMsg(&m, fabric.FlagPeek|fabric.FlagClaim); err != nil {
		return err
	}
	if _, err := c.wait(41); err != nil {
		return err
	}
	rb := c.mr.Bytes()[1<<20 : 1<<20+16]
	m = fabric.Msg{IOV: [][]byte{rb}, Desc: []fabric.Desc{c.mr.Desc()}, Addr: c.srv, Context: 41}
	if err := c.ep.TRecvMsg(&m, fabric.FlagClaim); err != nil {
		return err
	}
	if r, err := c.wait(41); err != nil || string(r.Buf) != "y" {
		return fmt.Errorf("claim: %+v %v", r, err)
	}
	m = fabric.Msg{Addr: c.srv, Tag: 0x704, Context: 42}
	if err := c.ep.TRecvMsg(&m, fabric.FlagPeek|fabric.FlagDiscard); err != nil {
		return err
	}
	if _, err := c.wait(42); err != nil {
		return err
	}
	for _, i := range []int{1, 0} { // out of order
		if err := c.ep.TRecv(rb, c.mr.Desc(), c.srv, uint64(0x700+i), 0, 43); err != nil {
			return err
		}
		if r, err := c.wait(43); err != nil || r.Buf[0] != byte('v'+i) {
			return fmt.Errorf("tag %#x: %+v %v", 0x700+i, r, err)
		}
	}
	m = fabric.Msg{Addr: c.srv, Tag: 0x704, Context: 44}
	if err := c.ep.TRecvMsg(&m, fabric.FlagPeek); err != nil {
		return err
	}
	if r, _ := c.wait(44); !errors.Is(r.Err(), fabric.ErrNoMsg) {
		return fmt.Errorf("the discarded message is still there: %+v", r)
	}
	return nil
}

func (c *client) cancel() error {
	rb := c.mr.Bytes()[1<<20 : 1<<20+16]
	if err := c.ep.TRecv(rb, c.mr.Desc(), c.srv, 0x777, 0, 50); err != nil {
		return err
	}
	if err := c.ep.Cancel(50); err != nil {
		return err
	}
	if r, _ := c.wait(50); !errors.Is(r.Err(), fabric.ErrCanceled) {
		return fmt.Errorf("canceled receive: %+v", r)
	}
	b := append(c.mr.Bytes()[512:512], "after cancel"...)
	return c.roundTrip(b, true, 0x777, nil, 52)
}

func (c *client) multiRecv() error {
	if err := c.ep.SetOption(fabric.OptMinMultiRecv, 1001); err != nil {
		return err
	}
	mb := c.mr.Bytes()[2<<20 : 2<<20+10000]
	m := fabric.Msg{IOV: [][]byte{mb}, Desc: []fabric.Desc{c.mr.Desc()}, Addr: fabric.AddrUnspec, Context: 60}
	if err := c.ep.RecvMsg(&m, fabric.FlagMultiRecv); err != nil {
		return err
	}
	b := c.mr.Bytes()[3<<20 : 3<<20+1000]
	for i := 0; i < 9; i++ {
		if err := c.ep.Send(pattern(b, i), c.mr.Desc(), c.srv, 61); err != nil {
			return err
		}
		if _, err := c.wait(61); err != nil {
			return err
		}
		r, err := c.wait(60)
		if err != nil {
			return err
		}
		if r.Len != 1000 || &r.Buf[0] != &mb[i*1000] || !bytes.Equal(r.Buf, b) {
			return fmt.Errorf("part %d: %d bytes at the wrong place or different", i, r.Len)
		}
		if last := r.Flags&fabric.FlagMultiRecv != 0; last != (i == 8) {
			return fmt.Errorf("part %d: flags %v", i, r.Flags)
		}
	}
	return nil
}

func (c *client) multiMR() error {
	back := c.mr.Bytes()[5<<20 : 5<<20+8192]
	for i := 1; i <= extraMRs; i++ {
		// Each write has a buffer of its own: it is the provider's
		// until the write completes.
		w := pattern(c.mr.Bytes()[4<<20+i*8192:4<<20+(i+1)*8192], i)
		if err := c.ep.Write(w, c.mr.Desc(), c.srv, c.dir[i][0]+uint64(i*100), c.dir[i][1], 70); err != nil {
			return err
		}
	}
	for i := 1; i <= extraMRs; i++ {
		if _, err := c.wait(70); err != nil {
			return err
		}
	}
	for i := 1; i <= extraMRs; i++ {
		if err := c.ep.Read(back, c.mr.Desc(), c.srv, c.dir[i][0]+uint64(i*100), c.dir[i][1], 71); err != nil {
			return err
		}
		if _, err := c.wait(71); err != nil {
			return err
		}
		if !bytes.Equal(back, pattern(make([]byte, 8192), i)) {
			return fmt.Errorf("region %d holds something else", i)
		}
	}
	return nil
}

// avXfer removes the server from the AV and inserts it again between
// transfers.
func (c *client) avXfer() error {
	for round := 0; round < 3; round++ {
		if err := c.roundTrip(pattern(c.mr.Bytes()[6<<20:6<<20+333], round), true, 0x800, nil, 80); err != nil {
			return err
		}
		if err := c.av.Remove(c.srv); err != nil {
			return err
		}
		if err := c.ep.Send([]byte{}, fabric.Desc{}, c.srv, 81); !errors.Is(err, fabric.ErrAddrNotAvail) {
			return fmt.Errorf("send to a removed address: %v", err)
		}
		var err error
		if c.srv, err = c.av.InsertService(c.srvIP, suiteService); err != nil {
			return err
		}
	}
	return nil
}

// flood sends floodCount messages as fast as the transport takes them;
// the server checks they arrive in order, once each, and reports how
// many.
func (c *client) flood() error {
	// Twice the transmit queue's buffers: the next message is written
	// before its post may fail with ErrAgain, and must not overwrite one
	// still outstanding.
	b := c.mr.Bytes()[7<<20 : 7<<20+512*64]
	sent, done := 0, 0
	out := make([]fabric.Completion, 64)
	for done < floodCount {
		for sent < floodCount {
			m := b[sent%512*64 : sent%512*64+64]
			binary.LittleEndian.PutUint64(m, uint64(sent))
			err := c.ep.TSend(m, c.mr.Desc(), c.srv, tagFlood, 90)
			if errors.Is(err, fabric.ErrAgain) {
				break
			}
			if err != nil {
				return err
			}
			sent++
		}
		n := c.cq.Read(out)
		for _, x := range out[:n] {
			if err := x.Err(); err != nil {
				return fmt.Errorf("after %d sent, %d done: %w (transport %+v)", sent, done, err, c.ep.Stats())
			}
			if x.Context == 90 {
				done++
			} else {
				c.pending = append(c.pending, x)
			}
		}
	}
	rb := c.mr.Bytes()[1<<20 : 1<<20+64]
	if err := c.ep.TRecv(rb, c.mr.Desc(), c.srv, tagReport, 0, 91); err != nil {
		return err
	}
	if err := c.ep.TSend(nil, fabric.Desc{}, c.srv, tagReport, 92); err != nil {
		return err
	}
	r, err := c.wait(91)
	if err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(r.Buf); got != floodCount {
		return fmt.Errorf("the server received %d of %d", got, floodCount)
	}
	_, err = c.wait(92)
	return err
}

// memRef is a reference for atomics: the same operation between two
// in-process devices (the mem provider), whose target memory the test
// reads directly.
type memRef struct {
	a      *side
	ep     *fabric.Endpoint
	to     fabric.Addr
	target *fabric.MR
}

func newMemRef() (*memRef, error) {
	open := func(addr string) (*side, *fabric.Endpoint, error) {
		infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{Provider: fabric.ProviderMem, Node: addr, EPType: fabric.EPRDM})
		if err != nil {
			return nil, nil, err
		}
		s := &side{info: infos[0]}
		if s.fab, err = fabric.OpenFabric(&s.info); err != nil {
			return nil, nil, err
		}
		if s.dom, err = s.fab.Domain(&s.info); err != nil {
			return nil, nil, err
		}
		if s.cq, err = s.dom.CQ(1024); err != nil {
			return nil, nil, err
		}
		if s.eq, err = s.fab.EQ(4); err != nil {
			return nil, nil, err
		}
		if s.av, err = s.dom.AV(2); err != nil {
			return nil, nil, err
		}
		if s.mr, err = s.dom.RegisterMemory(make([]byte, 1<<16), 0); err != nil {
			return nil, nil, err
		}
		ep, err := s.endpoint(&s.info)
		return s, ep, err
	}
	a, aep, err := open("198.19.255.1")
	if err != nil {
		return nil, err
	}
	b, bep, err := open("198.19.255.2")
	if err != nil {
		return nil, err
	}
	to, err := a.av.Insert(bep.Name())
	if err != nil {
		return nil, err
	}
	return &memRef{a: a, ep: aep, to: to, target: b.mr}, nil
}

// atomic runs an atomic like the client's, one element group at
// target[:len(init)] starting from init, and returns the target after it
// and the fetched values.
func (r *memRef) atomic(op fabric.AtomicOp, dt fabric.Datatype, k fabric.AtomicKind, init, operand, cmp []byte) ([]byte, []byte, error) {
	copy(r.target.Bytes(), init)
	n := len(init)
	b := r.a.mr.Bytes()
	copy(b, operand)
	copy(b[8192:], cmp)
	res := b[16384 : 16384+n]
	var err error
	switch k {
	case fabric.AtomicBase:
		err = r.ep.Atomic(op, dt, b[:n], r.a.mr.Desc(), r.to, r.target.Addr(), r.target.Key(), 1)
	case fabric.AtomicFetch:
		err = r.ep.FetchAtomic(op, dt, b[:n], r.a.mr.Desc(), res, r.a.mr.Desc(), r.to, r.target.Addr(), r.target.Key(), 1)
	default:
		err = r.ep.CompareAtomic(op, dt, b[:n], r.a.mr.Desc(), b[8192:8192+n], r.a.mr.Desc(), res, r.a.mr.Desc(), r.to, r.target.Addr(), r.target.Key(), 1)
	}
	if err != nil {
		return nil, nil, err
	}
	if _, err := r.a.next(); err != nil {
		return nil, nil, err
	}
	return bytes.Clone(r.target.Bytes()[:n]), bytes.Clone(res), nil
}

// atomics runs every atomic op on every datatype in every form against
// the server's memory, setting it first with an RDMA write and reading it
// after with an RDMA read, and compares with the reference.
func (c *client) atomics() error {
	ref, err := newMemRef()
	if err != nil {
		return err
	}
	raddr, key := c.dir[0][0]+3<<19, c.dir[0][1]
	b := c.mr.Bytes()[8<<20-65536:]
	init, operand, cmp, res, back := b[:64], b[1024:1088], b[2048:2112], b[3072:3136], b[4096:4160]
	tested := 0
	for op := fabric.AtomicOp(0); op < fabric.NumAtomicOps; op++ {
		for dt := fabric.Datatype(0); dt < fabric.NumDatatypes; dt++ {
			for k := fabric.AtomicBase; k <= fabric.AtomicCompare; k++ {
				count, _, err := c.ep.AtomicValid(op, dt, k)
				if err != nil {
					continue
				}
				n := min(count, 3) * dt.Size()
				for i := 0; i < n; i++ {
					init[i], operand[i], cmp[i] = byte(i*5+3), byte(i*7+1), byte(i*5+3)
					if i%3 == 0 {
						cmp[i] ^= 1
					}
				}
				wantTgt, wantRes, err := ref.atomic(op, dt, k, init[:n], operand[:n], cmp[:n])
				if err != nil {
					return fmt.Errorf("reference %v %v %d: %w", op, dt, k, err)
				}
				if err := c.ep.Write(init[:n], c.mr.Desc(), c.srv, raddr, key, 100); err != nil {
					return err
				}
				if _, err := c.wait(100); err != nil {
					return err
				}
				switch k {
				case fabric.AtomicBase:
					err = c.ep.Atomic(op, dt, operand[:n], c.mr.Desc(), c.srv, raddr, key, 101)
				case fabric.AtomicFetch:
					err = c.ep.FetchAtomic(op, dt, operand[:n], c.mr.Desc(), res[:n], c.mr.Desc(), c.srv, raddr, key, 101)
				default:
					err = c.ep.CompareAtomic(op, dt, operand[:n], c.mr.Desc(), cmp[:n], c.mr.Desc(), res[:n], c.mr.Desc(), c.srv, raddr, key, 101)
				}
				if err != nil {
					return err
				}
				if _, err := c.wait(101); err != nil {
					return fmt.Errorf("%v %v kind %d: %w", op, dt, k, err)
				}
				if err := c.ep.Read(back[:n], c.mr.Desc(), c.srv, raddr, key, 102); err != nil {
					return err
				}
				if _, err := c.wait(102); err != nil {
					return err
				}
				if !bytes.Equal(back[:n], wantTgt) || k != fabric.AtomicBase && !bytes.Equal(res[:n], wantRes) {
					return fmt.Errorf("%v %v kind %d: target %x result %x, want %x %x", op, dt, k, back[:n], res[:n], wantTgt, wantRes)
				}
				tested++
			}
		}
	}
	if tested < 250 {
		return fmt.Errorf("only %d combinations", tested)
	}
	return nil
}
