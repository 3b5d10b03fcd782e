package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/softfabric/softfabric/fabric"
)

// MsgConn is perftest's message channel in its RDMA-CM mode (-R): an RC
// connection made over RDMA-CM, each Write one SEND, each Read taken from
// the received messages in order, as a net.Conn so that Conn runs over it
// unchanged. perftest receives into one buffer of CMKeyMsgSize bytes,
// reposted after each message, and sends only in turn (client first,
// Conn.Xchg), so no message is ever larger or unsolicited; MsgConn keeps a
// few receives posted.
type MsgConn struct {
	ep     *fabric.Endpoint
	tx, rx *fabric.CQ
	eq     *fabric.EQ
	mr     *fabric.MR
	local  netip.AddrPort
	remote netip.AddrPort

	rd, wd   deadline
	gone     chan struct{} // closed when the connection ends
	stop     context.CancelFunc
	watching chan struct{}

	pending  []byte // the unread rest of the current message
	slot     int    // its receive slot, -1 for none
	txc, rxc [1]fabric.Completion
	once     sync.Once
}

const (
	msgSlot  = 64 // bytes per message slot: perftest's are at most 56
	msgRecvs = 4  // receives kept posted
	msgSend  = msgRecvs
)

// NewMsgConn opens the channel's endpoint on dom for info (the domain's
// offer to connect, or a connection request's Info to accept) and posts
// its receives; Dial or Accept connects it.
func NewMsgConn(f *fabric.Fabric, dom *fabric.Domain, info *fabric.Info) (m *MsgConn, err error) {
	m = &MsgConn{slot: -1, gone: make(chan struct{})}
	defer func() {
		if err != nil {
			m.Close()
			err = fmt.Errorf("perftest message channel: %w", err)
		}
	}()
	// Each CQ holds what its queue may have outstanding, as fabric wants.
	if m.tx, err = dom.CQ(max(16, info.TX.Size)); err != nil {
		return m, err
	}
	if m.rx, err = dom.CQ(max(16, info.RX.Size)); err != nil {
		return m, err
	}
	if m.eq, err = f.EQ(8); err != nil {
		return m, err
	}
	if m.ep, err = dom.Endpoint(info); err != nil {
		return m, err
	}
	for _, step := range []func() error{
		func() error { return m.ep.Bind(m.tx, fabric.FlagSend) },
		func() error { return m.ep.Bind(m.rx, fabric.FlagRecv) },
		func() error { return m.ep.Bind(m.eq, 0) },
		m.ep.Enable,
	} {
		if err = step(); err != nil {
			return m, err
		}
	}
	if m.mr, err = dom.RegisterMemory(make([]byte, (msgRecvs+1)*msgSlot), fabric.AccessSend|fabric.AccessRecv); err != nil {
		return m, err
	}
	for i := range msgRecvs {
		if err = m.post(i); err != nil {
			return m, err
		}
	}
	return m, nil
}

func (m *MsgConn) buf(slot int) []byte {
	return m.mr.Bytes()[slot*msgSlot : (slot+1)*msgSlot]
}

func (m *MsgConn) post(slot int) error {
	return m.ep.Recv(m.buf(slot), m.mr.Desc(), fabric.AddrUnspec, uint64(slot))
}

// Dial connects to perftest's server listening at addr (rdma_connect).
func (m *MsgConn) Dial(ctx context.Context, addr netip.AddrPort) error {
	if err := m.ep.Connect(ctx, addr, nil); err != nil {
		return err
	}
	m.up(netip.AddrPortFrom(m.ep.QPInfo().GID.Unmap(), 0), addr)
	return nil
}

// Accept accepts the connection request the channel was opened for
// (rdma_accept), from peer.
func (m *MsgConn) Accept(ctx context.Context, local, peer netip.AddrPort) error {
	if err := m.ep.Accept(ctx, nil); err != nil {
		return err
	}
	m.up(local, peer)
	return nil
}

// up starts watching the connected channel for its end.
func (m *MsgConn) up(local, remote netip.AddrPort) {
	m.local, m.remote = local, remote
	ctx, cancel := context.WithCancel(context.Background())
	m.stop, m.watching = cancel, make(chan struct{})
	go func() {
		defer close(m.watching)
		for {
			ev, err := m.eq.Read(ctx)
			if err != nil {
				return
			}
			if ev.Kind == fabric.EventShutdown {
				close(m.gone)
				return
			}
		}
	}()
}

// next waits for q's next completion until dl.
func (m *MsgConn) next(q *fabric.CQ, out []fabric.Completion, dl *deadline) error {
	for {
		if q.Read(out) > 0 {
			return nil
		}
		t, changed := dl.get()
		if !t.IsZero() && !time.Now().Before(t) {
			return os.ErrDeadlineExceeded
		}
		select {
		case <-m.gone:
			if q.Read(out) > 0 {
				return nil
			}
			return io.EOF
		default:
		}
		ctx, cancel := context.WithCancel(context.Background())
		if !t.IsZero() {
			ctx, cancel = context.WithDeadline(ctx, t)
		}
		go func() {
			select {
			case <-changed:
			case <-m.gone:
			case <-ctx.Done():
			}
			cancel()
		}()
		n, err := q.ReadContext(ctx, out)
		cancel()
		if n > 0 {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// Read reads from the current message, waiting for the next one when it
// is used up.
func (m *MsgConn) Read(b []byte) (int, error) {
	for len(m.pending) == 0 {
		if err := m.next(m.rx, m.rxc[:], &m.rd); err != nil {
			return 0, err
		}
		e := &m.rxc[0]
		if err := e.Err(); err != nil {
			if m.isGone() {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("perftest message channel: receive: %w", err)
		}
		m.slot = int(e.Context)
		m.pending = m.buf(m.slot)[:min(e.Len, msgSlot)]
		if len(m.pending) == 0 {
			if err := m.repost(); err != nil {
				return 0, err
			}
		}
	}
	n := copy(b, m.pending)
	m.pending = m.pending[n:]
	if len(m.pending) == 0 {
		// The receive goes back before the caller answers: perftest
		// sends its next message only after our answer.
		if err := m.repost(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (m *MsgConn) repost() error {
	s := m.slot
	m.slot = -1
	if err := m.post(s); err != nil {
		return fmt.Errorf("perftest message channel: posting a receive: %w", err)
	}
	return nil
}

// Write sends b as one message and waits for its completion, as
// rdma_write_data does.
func (m *MsgConn) Write(b []byte) (int, error) {
	if len(b) > msgSlot {
		return 0, fmt.Errorf("perftest message channel: a %d-byte message (at most %d)", len(b), msgSlot)
	}
	s := m.buf(msgSend)[:len(b)]
	copy(s, b)
	if err := m.ep.Send(s, m.mr.Desc(), fabric.AddrUnspec, msgSend); err != nil {
		if m.isGone() {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("perftest message channel: send: %w", err)
	}
	if err := m.next(m.tx, m.txc[:], &m.wd); err != nil {
		return 0, err
	}
	if err := m.txc[0].Err(); err != nil {
		if m.isGone() {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("perftest message channel: send: %w", err)
	}
	return len(b), nil
}

func (m *MsgConn) isGone() bool {
	select {
	case <-m.gone:
		return true
	default:
		return false
	}
}

// Gone is closed when the peer disconnected the channel.
func (m *MsgConn) Gone() <-chan struct{} { return m.gone }

// Close disconnects (waiting briefly for the peer's answer) and closes
// the channel's endpoint and queues.
func (m *MsgConn) Close() error {
	m.once.Do(func() {
		if m.ep != nil {
			if m.stop != nil && !m.isGone() {
				_ = m.ep.Shutdown()
			}
			_ = m.ep.Close()
		}
		if m.stop != nil {
			m.stop()
			<-m.watching
		}
		if m.mr != nil {
			_ = m.mr.Close()
		}
		for _, q := range []*fabric.CQ{m.tx, m.rx} {
			if q != nil {
				_ = q.Close()
			}
		}
		if m.eq != nil {
			_ = m.eq.Close()
		}
	})
	return nil
}

// LocalAddr is this end's address (port 0 for a client).
func (m *MsgConn) LocalAddr() net.Addr { return net.TCPAddrFromAddrPort(m.local) }

// RemoteAddr is the peer's address and, for a client, the port.
func (m *MsgConn) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(m.remote) }

// SetDeadline sets both deadlines.
func (m *MsgConn) SetDeadline(t time.Time) error {
	m.rd.set(t)
	m.wd.set(t)
	return nil
}

// SetReadDeadline bounds Read, even one under way.
func (m *MsgConn) SetReadDeadline(t time.Time) error { m.rd.set(t); return nil }

// SetWriteDeadline bounds Write, even one under way.
func (m *MsgConn) SetWriteDeadline(t time.Time) error { m.wd.set(t); return nil }

// deadline is a net.Conn deadline that a waiting call notices changing.
type deadline struct {
	mu      sync.Mutex
	t       time.Time
	changed chan struct{}
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.t = t
	if d.changed != nil {
		close(d.changed)
	}
	d.changed = make(chan struct{})
}

func (d *deadline) get() (time.Time, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	return d.t, d.changed
}
