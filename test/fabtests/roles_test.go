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

// Services of the scenarios' endpoints.
const (
	msgService   = 7471
	rdmService   = 7472
	dgramService = 7473
	rounds       = 200
	// msgTarget is where in the server's memory the client's RMA goes.
	msgTarget = 3 << 19
)

// side is one process's fabric objects.
type side struct {
	info fabric.Info
	fab  *fabric.Fabric
	dom  *fabric.Domain
	cq   *fabric.CQ
	eq   *fabric.EQ
	av   *fabric.AV
	mr   *fabric.MR
	out  [16]fabric.Completion
}

func open(self string, typ fabric.EPType, p fabric.Progress, service uint16) (*side, error) {
	infos, err := fabric.GetInfo(context.Background(), &fabric.Hints{Node: self, EPType: typ, Service: service,
		Domain: fabric.DomainAttr{Progress: p}})
	if err != nil {
		return nil, err
	}
	s := &side{info: infos[0]}
	if s.fab, err = fabric.OpenFabric(&s.info); err != nil {
		return nil, err
	}
	if s.dom, err = s.fab.Domain(&s.info); err != nil {
		return nil, err
	}
	if s.cq, err = s.dom.CQ(4096); err != nil {
		return nil, err
	}
	if s.eq, err = s.fab.EQ(8); err != nil {
		return nil, err
	}
	if s.av, err = s.dom.AV(8); err != nil {
		return nil, err
	}
	if s.mr, err = s.dom.RegisterMemory(make([]byte, 8<<20), 0); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *side) endpoint(info *fabric.Info) (*fabric.Endpoint, error) {
	ep, err := s.dom.Endpoint(info)
	if err != nil {
		return nil, err
	}
	for _, o := range []any{s.cq, s.eq, s.av} {
		if _, isAV := o.(*fabric.AV); isAV && info.EP.Type == fabric.EPMsg {
			continue
		}
		if err := ep.Bind(o, 0); err != nil {
			return nil, err
		}
	}
	return ep, ep.Enable()
}

// next waits for a completion (10 s) and fails on an error status.
func (s *side) next() (fabric.Completion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.cq.ReadContext(ctx, s.out[:1]); err != nil {
		return fabric.Completion{}, fmt.Errorf("waiting for a completion: %w", err)
	}
	c := s.out[0]
	if err := c.Err(); err != nil {
		return c, fmt.Errorf("completion %#x (%v): %w", c.Context, c.Flags, err)
	}
	return c, nil
}

// post retries a post that finds its queue full.
func (s *side) post(f func() error) error {
	for {
		err := f()
		if !errors.Is(err, fabric.ErrAgain) {
			return err
		}
		s.dom.Progress()
	}
}

// pattern fills b with bytes that depend on the round.
func pattern(b []byte, round int) []byte {
	for i := range b {
		b[i] = byte(i*31 + round*7 + 1)
	}
	return b
}

// size is the message size of a round: 1 byte to 12 KiB.
func size(round int) int { return 1 + (round*997)%(12<<10) }

func runRole(role, self, peer string) error {
	switch role {
	case "msg-server":
		return msgServer(self)
	case "msg-client":
		return msgClient(self, peer)
	case "rdm-server":
		return rdmServer(self)
	case "rdm-client":
		return rdmClient(self, peer)
	case "suite-server":
		return suiteServer(self)
	case "suite-client":
		return suiteClient(self, peer)
	case "dgram-server":
		return dgramServer(self)
	case "dgram-client":
		return dgramClient(self, peer)
	case "rma4-server":
		return rma4Server(self)
	case "rma4-client":
		return rma4Client(self, peer)
	}
	return fmt.Errorf("unknown role %q", role)
}

// listen opens a MSG side with a passive endpoint listening on service,
// and says "ready".
func listen(self string, service uint16) (*side, *fabric.PassiveEndpoint, error) {
	s, err := open(self, fabric.EPMsg, fabric.ProgressAuto, service)
	if err != nil {
		return nil, nil, err
	}
	pep, err := s.fab.PassiveEndpoint(&s.info)
	if err != nil {
		return nil, nil, err
	}
	if err := pep.Bind(s.eq); err != nil {
		return nil, nil, err
	}
	if err := pep.Listen(); err != nil {
		return nil, nil, err
	}
	fmt.Println("ready")
	return s, pep, nil
}

// msgServer accepts a connection, tells the client where its memory is
// (in the accept's private data), and echoes every message.
func msgServer(self string) error {
	s, pep, err := listen(self, msgService)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := s.eq.Read(ctx)
	if err != nil || ev.Kind != fabric.EventConnReq {
		return fmt.Errorf("connection request: %v %v", ev.Kind, err)
	}
	ep, err := s.endpoint(ev.Info)
	if err != nil {
		return err
	}
	buf := s.mr.Bytes()
	for i := 0; i < 32; i++ {
		if err := ep.Recv(buf[i*16384:(i+1)*16384], s.mr.Desc(), fabric.AddrUnspec, uint64(i)); err != nil {
			return err
		}
	}
	var priv [16]byte
	binary.LittleEndian.PutUint64(priv[:], s.mr.Addr()+msgTarget)
	binary.LittleEndian.PutUint64(priv[8:], s.mr.Key())
	if err := ep.Accept(ctx, priv[:]); err != nil {
		return err
	}
	for echoed := 0; echoed < rounds; {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c.Flags&fabric.FlagRecv == 0 {
			continue
		}
		// Echo a copy (the send owns its buffer until it completes), and
		// give the receive buffer back at once.
		slot := int(c.Context)
		echo := append(buf[(32+echoed%32)*16384:(32+echoed%32)*16384], c.Buf...)
		if err := s.post(func() error { return ep.Send(echo, s.mr.Desc(), fabric.AddrUnspec, 1000) }); err != nil {
			return err
		}
		if err := s.post(func() error {
			return ep.Recv(buf[slot*16384:(slot+1)*16384], s.mr.Desc(), fabric.AddrUnspec, uint64(slot))
		}); err != nil {
			return err
		}
		echoed++
	}
	// Wait for the client to finish its RMA and say goodbye.
	for {
		ev, err := s.eq.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the shutdown: %w", err)
		}
		if ev.Kind == fabric.EventShutdown {
			break
		}
	}
	// The client's writes and atomics are in our memory.
	if got, want := buf[msgTarget:msgTarget+4096], pattern(make([]byte, 4096), 99); !bytes.Equal(got, want) {
		return errors.New("the client's RDMA write is not in memory")
	}
	_ = ep.Close()
	return pep.Close()
}

func msgClient(self, peer string) error {
	s, err := open(self, fabric.EPMsg, fabric.ProgressAuto, 0)
	if err != nil {
		return err
	}
	ep, err := s.endpoint(&s.info)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ep.Connect(ctx, netip.AddrPortFrom(netip.MustParseAddr(peer), msgService), nil); err != nil {
		return err
	}
	ev, err := s.eq.Read(ctx)
	if err != nil || ev.Kind != fabric.EventConnected || len(ev.Data) != 16 {
		return fmt.Errorf("connected event: %+v %v", ev, err)
	}
	raddr, rkey := binary.LittleEndian.Uint64(ev.Data), binary.LittleEndian.Uint64(ev.Data[8:])
	buf := s.mr.Bytes()
	send, recv := buf[:16384], buf[16384:32768]
	for r := 0; r < rounds; r++ {
		n := size(r)
		if err := ep.Recv(recv, s.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
			return err
		}
		if err := ep.Send(pattern(send[:n], r), s.mr.Desc(), fabric.AddrUnspec, 2); err != nil {
			return err
		}
		for got := 0; got < 2; got++ {
			c, err := s.next()
			if err != nil {
				return fmt.Errorf("round %d: %w", r, err)
			}
			if c.Flags&fabric.FlagRecv != 0 && (c.Len != n || !bytes.Equal(c.Buf, pattern(make([]byte, n), r))) {
				return fmt.Errorf("round %d: echo of %d bytes came back as %d different bytes", r, n, c.Len)
			}
		}
	}
	// RMA: write 4 KiB, read it back; fetch-add and compare-swap.
	w := pattern(buf[65536:65536+4096], 99)
	if err := ep.Write(w, s.mr.Desc(), fabric.AddrUnspec, raddr, rkey, 3); err != nil {
		return err
	}
	back := buf[131072 : 131072+4096]
	if err := ep.Read(back, s.mr.Desc(), fabric.AddrUnspec, raddr, rkey, 4); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		if _, err := s.next(); err != nil {
			return err
		}
	}
	if !bytes.Equal(back, w) {
		return errors.New("RDMA read did not return what was written")
	}
	counter := raddr + 8192
	one, res := buf[200000:200008], buf[200008:200016]
	binary.LittleEndian.PutUint64(one, 1)
	for i := 0; i < 50; i++ {
		if err := ep.FetchAtomic(fabric.AtomicSum, fabric.Uint64, one, s.mr.Desc(), res, s.mr.Desc(), fabric.AddrUnspec, counter, rkey, 5); err != nil {
			return err
		}
		if _, err := s.next(); err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint64(res); got != uint64(i) {
			return fmt.Errorf("fetch-add %d returned %d", i, got)
		}
	}
	return ep.Shutdown()
}

// rdmServer echoes tagged messages (manual progress) and leaves its
// memory to the client's atomics.
func rdmServer(self string) error {
	s, err := open(self, fabric.EPRDM, fabric.ProgressManual, rdmService)
	if err != nil {
		return err
	}
	ep, err := s.endpoint(&s.info)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	buf := s.mr.Bytes()
	for i := 0; i < 32; i++ {
		if err := ep.TRecv(buf[i*16384:(i+1)*16384], s.mr.Desc(), fabric.AddrUnspec, 0, ^uint64(0), uint64(i)); err != nil {
			return err
		}
	}
	var peer fabric.Addr = fabric.AddrUnspec
	for echoed := 0; echoed < rounds+1; {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c.Flags&fabric.FlagRecv == 0 {
			continue
		}
		if peer == fabric.AddrUnspec {
			// The first message tells where the client is.
			if peer, err = s.av.InsertString(string(c.Buf)); err != nil {
				return err
			}
		}
		reply := c.Buf
		if c.Tag == 0 {
			var where [16]byte
			binary.LittleEndian.PutUint64(where[:], s.mr.Addr()+1<<19)
			binary.LittleEndian.PutUint64(where[8:], s.mr.Key())
			reply = append(buf[600000:600000], where[:]...)
		}
		if err := s.post(func() error { return ep.TSend(reply, s.mr.Desc(), peer, c.Tag, 1000) }); err != nil {
			return err
		}
		slot := c.Context
		if err := s.post(func() error {
			return ep.TRecv(buf[slot*16384:(slot+1)*16384], s.mr.Desc(), fabric.AddrUnspec, 0, ^uint64(0), slot)
		}); err != nil {
			return err
		}
		echoed++
	}
	// Keep the transport going while the client runs its atomics, until it
	// says it is done.
	for {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c.Flags&fabric.FlagRecv != 0 && c.Tag == 1<<40 {
			break
		}
	}
	if got := int32(binary.LittleEndian.Uint32(buf[1<<19:])); got != -40 {
		return fmt.Errorf("min over the client's values left %d, want -40", got)
	}
	return ep.Close()
}

func rdmClient(self, peer string) error {
	s, err := open(self, fabric.EPRDM, fabric.ProgressAuto, 0)
	if err != nil {
		return err
	}
	ep, err := s.endpoint(&s.info)
	if err != nil {
		return err
	}
	srv, err := s.av.InsertService(netip.MustParseAddr(peer), rdmService)
	if err != nil {
		return err
	}
	buf := s.mr.Bytes()
	hello := append(buf[700000:700000], ep.Name().String()...)
	if err := ep.TRecv(buf[16384:32768], s.mr.Desc(), srv, 0, 0, 1); err != nil {
		return err
	}
	if err := ep.TSend(hello, s.mr.Desc(), srv, 0, 2); err != nil {
		return err
	}
	var raddr, rkey uint64
	for got := 0; got < 2; got++ {
		c, err := s.next()
		if err != nil {
			return err
		}
		if c.Flags&fabric.FlagRecv != 0 {
			raddr, rkey = binary.LittleEndian.Uint64(c.Buf), binary.LittleEndian.Uint64(c.Buf[8:])
		}
	}
	// Tagged echoes, the receives posted in reverse tag order so that the
	// echoes arrive unexpected and are matched by tag.
	const batch = 20
	for r := 1; r <= rounds; r += batch {
		for i := r; i < r+batch; i++ {
			n := size(i) % (fabric.RDMEagerSize - 1)
			if err := ep.TSend(pattern(buf[i%batch*16384:i%batch*16384+n], i), s.mr.Desc(), srv, uint64(i), 3); err != nil {
				return err
			}
		}
		for i := r + batch - 1; i >= r; i-- {
			if err := ep.TRecv(buf[400000+(i%batch)*16384:400000+(i%batch+1)*16384], s.mr.Desc(), srv, uint64(i), 0, uint64(i)); err != nil {
				return err
			}
		}
		for got := 0; got < 2*batch; got++ {
			c, err := s.next()
			if err != nil {
				return err
			}
			if c.Flags&fabric.FlagRecv == 0 {
				continue
			}
			i := int(c.Tag)
			n := size(i) % (fabric.RDMEagerSize - 1)
			if c.Context != uint64(i) || !bytes.Equal(c.Buf, pattern(make([]byte, n), i)) {
				return fmt.Errorf("tag %d: echo differs (context %d, %d bytes)", i, c.Context, c.Len)
			}
		}
	}
	// A software atomic (min on int32) the server's provider executes.
	v := buf[900000:900004]
	for _, x := range []int32{10, 0, -10, -40, -20} {
		binary.LittleEndian.PutUint32(v, uint32(x))
		if err := ep.Atomic(fabric.AtomicMin, fabric.Int32, v, s.mr.Desc(), srv, raddr, rkey, 4); err != nil {
			return err
		}
		if _, err := s.next(); err != nil {
			return err
		}
	}
	if err := ep.TSend(nil, fabric.Desc{}, srv, 1<<40, 5); err != nil {
		return err
	}
	_, err = s.next()
	return err
}

// dgramServer echoes datagrams.
func dgramServer(self string) error {
	s, err := open(self, fabric.EPDgram, fabric.ProgressAuto, dgramService)
	if err != nil {
		return err
	}
	info := s.info
	info.Caps |= fabric.CapSource
	ep, err := s.endpoint(&info)
	if err != nil {
		return err
	}
	buf := s.mr.Bytes()
	for i := 0; i < 64; i++ {
		if err := ep.Recv(buf[i*2048:(i+1)*2048], s.mr.Desc(), fabric.AddrUnspec, uint64(i)); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	var peer fabric.Addr = fabric.AddrUnspec
	// Echo until the last datagram came, and a little longer for resends.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		n := s.cq.Read(s.out[:])
		for _, c := range s.out[:n] {
			if c.Flags&fabric.FlagRecv == 0 {
				continue
			}
			if err := c.Err(); err != nil {
				return err
			}
			if peer == fabric.AddrUnspec {
				if peer, err = s.av.InsertString(string(c.Buf[8:])); err != nil {
					return err
				}
			}
			if err := s.post(func() error { return ep.Send(c.Buf, s.mr.Desc(), peer, 1000) }); err != nil {
				return err
			}
			if binary.LittleEndian.Uint64(c.Buf) == rounds-1 {
				if end := time.Now().Add(500 * time.Millisecond); end.Before(deadline) {
					deadline = end
				}
			}
			slot := c.Context
			if err := ep.Recv(buf[slot*2048:(slot+1)*2048], s.mr.Desc(), fabric.AddrUnspec, slot); err != nil {
				return err
			}
		}
	}
	return ep.Close()
}

func dgramClient(self, peer string) error {
	s, err := open(self, fabric.EPDgram, fabric.ProgressAuto, 0)
	if err != nil {
		return err
	}
	ep, err := s.endpoint(&s.info)
	if err != nil {
		return err
	}
	srv, err := s.av.InsertService(netip.MustParseAddr(peer), dgramService)
	if err != nil {
		return err
	}
	buf := s.mr.Bytes()
	name := ep.Name().String()
	echoes, resent := 0, 0
	if err := ep.Recv(buf[65536:67584], s.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
		return err
	}
	for r := 0; r < rounds; r++ {
		m := buf[r%16*2048 : r%16*2048+8+len(name)]
		binary.LittleEndian.PutUint64(m, uint64(r))
		copy(m[8:], name)
		// Datagrams may be lost: send again after 200 ms without an echo.
	send:
		for try := 0; ; try++ {
			if try == 10 {
				return fmt.Errorf("datagram %d: no echo after %d sends", r, try)
			}
			resent += min(try, 1)
			if err := s.post(func() error { return ep.Send(m, s.mr.Desc(), srv, 2) }); err != nil {
				return err
			}
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				if s.cq.Read(s.out[:1]) == 0 {
					continue
				}
				c := s.out[0]
				if err := c.Err(); err != nil {
					return err
				}
				if c.Flags&fabric.FlagRecv == 0 {
					continue
				}
				seq := binary.LittleEndian.Uint64(c.Buf)
				if string(c.Buf[8:]) != name {
					return fmt.Errorf("datagram %d: echo differs", r)
				}
				if err := ep.Recv(buf[65536:67584], s.mr.Desc(), fabric.AddrUnspec, 1); err != nil {
					return err
				}
				if seq == uint64(r) {
					echoes++
					break send
				}
			}
		}
	}
	if resent > rounds/10 {
		return fmt.Errorf("%d of %d datagrams were sent again", resent, rounds)
	}
	if echoes != rounds {
		return fmt.Errorf("%d of %d echoes", echoes, rounds)
	}
	return nil
}
