// Package cm carries connection requests, replies, rejections and
// disconnects between endpoints before (and after) their RDMA connection
// exists.
//
// A connected (MSG) endpoint exchanges, before its queue pair can be
// connected, an opaque blob of transport parameters (QPN, PSN, GID…; cm does
// not interpret it) and the application's private data (libfabric CM data, at
// most MaxPrivateData bytes as in an RDMA-CM REQ). The handshake follows the
// InfiniBand CM:
//
//	requester (Dial)              acceptor (Listener.Next, Request.Accept)
//	REQ {params, private}  ──▶
//	                       ◀──    REP {params, private}  or  REJ {private}
//	RTU                    ──▶
//	        … connection lifetime …
//	DREQ                   ◀─▶    (either side)
//
// For now the messages travel over a TCP stream, one per connection, which
// stays open for the connection's lifetime to carry the disconnect. Each
// direction of the stream starts with the 4-byte magic "SFCM" and a version
// byte (1), then carries frames: a 1-byte type (REQ=1, REP=2, REJ=3, RTU=4,
// DREQ=5), a 2-byte big-endian params length (at most 1024), a 1-byte private
// data length (at most MaxPrivateData), then the params and the private data.
// A DREQ is answered by closing the stream, which plays the part of the DREP.
//
// This package is a seam: a later version replaces the TCP transport with
// RDMA-CM's wire protocol (MADs over UD QP1). Its API therefore says nothing
// about TCP; addresses are netip.AddrPort.
package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPrivateData is the largest private data, in bytes, that a request,
// reply or rejection can carry (the size of an RDMA-CM REQ's private data).
const MaxPrivateData = 196

const (
	maxParams        = 1024            // largest transport-parameter blob
	queueLen         = 64              // requests waiting for Next
	handshakeTimeout = 5 * time.Second // listener's deadline to read a REQ
	disconnectWait   = 2 * time.Second // how long Disconnect waits for the peer
	version          = 1
	magic            = "SFCM"
)

// Errors returned by this package.
var (
	// ErrRejected is returned by Dial when the peer rejected the request;
	// the error is a *RejectError carrying the peer's private data.
	ErrRejected = errors.New("cm: connection rejected")
	// ErrPrivateData is returned when private data exceeds MaxPrivateData.
	ErrPrivateData = errors.New("cm: private data too long")
	// ErrClosed is returned by operations on a closed Listener or on a
	// Request that was already answered.
	ErrClosed = errors.New("cm: closed")
	// ErrProtocol reports a malformed or unexpected message; it is wrapped
	// with details.
	ErrProtocol = errors.New("cm: protocol error")
)

// RejectError is returned by Dial when the peer rejects the request;
// errors.Is(err, ErrRejected) holds for it.
type RejectError struct {
	// Data is the private data the peer sent with its rejection.
	Data []byte
}

// Error implements error.
func (e *RejectError) Error() string {
	return fmt.Sprintf("%v (%d bytes of private data)", ErrRejected, len(e.Data))
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }

// msgType is a frame's type byte.
type msgType uint8

const (
	msgREQ msgType = 1 + iota
	msgREP
	msgREJ
	msgRTU
	msgDREQ
)

func (t msgType) String() string {
	if t >= msgREQ && t <= msgDREQ {
		return [...]string{"REQ", "REP", "REJ", "RTU", "DREQ"}[t-1]
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// frame is one CM message.
type frame struct {
	typ     msgType
	params  []byte
	private []byte
}

const headerLen = 4 // type, params length (2), private length

// appendFrame appends f's encoding to b. f must be valid (see checkSizes).
func appendFrame(b []byte, f frame) []byte {
	b = append(b, byte(f.typ))
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.params)))
	b = append(b, byte(len(f.private)))
	b = append(b, f.params...)
	return append(b, f.private...)
}

// readFrame reads one frame. It returns io.EOF if r ends before the frame's
// first byte, an ErrProtocol-wrapped error if the frame is malformed or
// truncated, and r's other errors as they are.
func readFrame(r io.Reader) (frame, error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, truncated(err)
	}
	f := frame{typ: msgType(h[0])}
	np, nd := int(binary.BigEndian.Uint16(h[1:3])), int(h[3])
	switch {
	case f.typ < msgREQ || f.typ > msgDREQ:
		return frame{}, fmt.Errorf("%w: unknown message %v", ErrProtocol, f.typ)
	case np > maxParams:
		return frame{}, fmt.Errorf("%w: %v params length %d > %d", ErrProtocol, f.typ, np, maxParams)
	case nd > MaxPrivateData:
		return frame{}, fmt.Errorf("%w: %v private data length %d > %d", ErrProtocol, f.typ, nd, MaxPrivateData)
	}
	if np+nd > 0 {
		body := make([]byte, np+nd)
		if _, err := io.ReadFull(r, body); err != nil {
			return frame{}, truncated(err)
		}
		if np > 0 {
			f.params = body[:np:np]
		}
		if nd > 0 {
			f.private = body[np:]
		}
	}
	return f, nil
}

// truncated maps io.ErrUnexpectedEOF (a partial read) to ErrProtocol.
func truncated(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated message", ErrProtocol)
	}
	return err
}

// readHello reads and checks the stream's magic and version.
func readHello(r io.Reader) error {
	var h [len(magic) + 1]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: stream ended before hello", ErrProtocol)
		}
		return err
	}
	if string(h[:len(magic)]) != magic {
		return fmt.Errorf("%w: bad magic %q", ErrProtocol, h[:len(magic)])
	}
	if h[len(magic)] != version {
		return fmt.Errorf("%w: unsupported version %d", ErrProtocol, h[len(magic)])
	}
	return nil
}

// hello returns a stream's start followed by frame f.
func hello(f frame) []byte {
	b := append(make([]byte, 0, len(magic)+1+headerLen+len(f.params)+len(f.private)), magic...)
	return appendFrame(append(b, version), f)
}

// checkSizes validates what the caller wants to send.
func checkSizes(params, private []byte) error {
	if len(private) > MaxPrivateData {
		return ErrPrivateData
	}
	if len(params) > maxParams {
		return fmt.Errorf("cm: transport params too long (%d > %d bytes)", len(params), maxParams)
	}
	return nil
}

// withCtx runs op with nc's deadline tied to ctx: ctx's deadline applies and
// cancelling ctx unblocks op. If ctx ends, its error is returned.
func withCtx(ctx context.Context, nc net.Conn, op func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, hasDL := ctx.Deadline()
	nc.SetDeadline(dl) // zero if none
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		nc.SetDeadline(time.Unix(1, 0)) // in the past: unblocks pending I/O
		close(fired)
	})
	err := op()
	if !stop() {
		<-fired
	}
	nc.SetDeadline(time.Time{})
	if hasDL && errors.Is(err, os.ErrDeadlineExceeded) {
		<-ctx.Done() // ctx's deadline has passed too; its timer is due
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// addrPort returns a's address and port, with IPv4-mapped addresses unmapped.
func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// Listener accepts connection requests on a TCP address.
type Listener struct {
	ln      *net.TCPListener
	addr    netip.AddrPort
	hsWait  time.Duration
	queue   chan *Request
	closed  chan struct{}
	dropped atomic.Uint64
	wg      sync.WaitGroup

	mu       sync.Mutex
	isClosed bool
	pending  map[net.Conn]struct{} // streams whose REQ is being read
}

// Listen starts listening for connection requests on addr. Port 0 picks a
// free port (see Addr); the zero netip.Addr listens on all addresses.
func Listen(addr netip.AddrPort) (*Listener, error) {
	return listen(addr, handshakeTimeout)
}

func listen(addr netip.AddrPort, hsWait time.Duration) (*Listener, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("cm: listen: %w", err)
	}
	l := &Listener{
		ln:      ln,
		addr:    addrPort(ln.Addr()),
		hsWait:  hsWait,
		queue:   make(chan *Request, queueLen),
		closed:  make(chan struct{}),
		pending: make(map[net.Conn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Dropped returns how many incoming requests were dropped, either because
// their exchange was malformed or timed out, or because too many requests
// were waiting for Next.
func (l *Listener) Dropped() uint64 { return l.dropped.Load() }

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			// Closed, or a transient failure: back off and retry.
			select {
			case <-l.closed:
				return
			case <-time.After(50 * time.Millisecond): // e.g. EMFILE
			}
			continue
		}
		l.mu.Lock()
		if l.isClosed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		l.pending[nc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.handshake(nc)
	}
}

// handshake reads a stream's hello and REQ and queues the request.
func (l *Listener) handshake(nc net.Conn) {
	defer l.wg.Done()
	nc.SetDeadline(time.Now().Add(l.hsWait))
	err := readHello(nc)
	var f frame
	if err == nil {
		f, err = readFrame(nc)
	}
	if err == nil && f.typ != msgREQ {
		err = fmt.Errorf("%w: got %v, want REQ", ErrProtocol, f.typ)
	}
	nc.SetDeadline(time.Time{})

	l.mu.Lock()
	delete(l.pending, nc)
	closed := l.isClosed
	l.mu.Unlock()
	if closed {
		nc.Close()
		return
	}
	if err != nil {
		l.dropped.Add(1)
		nc.Close()
		return
	}
	r := &Request{nc: nc, peer: addrPort(nc.RemoteAddr()), params: f.params, private: f.private}
	select {
	case l.queue <- r:
	default: // queue full: refuse
		l.dropped.Add(1)
		nc.Close()
	}
}

// Next waits for the next connection request. Cancelling ctx ends the wait
// with ctx.Err(); closing the listener ends it with ErrClosed. Requests whose
// exchange is malformed are dropped (see Dropped) and never returned.
func (l *Listener) Next(ctx context.Context) (*Request, error) {
	select {
	case <-l.closed:
		return nil, ErrClosed
	default:
	}
	select {
	case r := <-l.queue:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops the listener: pending Next calls return ErrClosed, requests
// not yet returned by Next are dropped (their requesters see the stream
// close), and all of the listener's goroutines exit before Close returns.
// Requests already returned stay usable. Close is idempotent.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.isClosed {
		l.mu.Unlock()
		return nil
	}
	l.isClosed = true
	close(l.closed)
	for nc := range l.pending {
		nc.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	for {
		select {
		case r := <-l.queue:
			r.nc.Close()
		default:
			return err
		}
	}
}

// Request is a connection request received by a Listener. Answer it with
// exactly one of Accept or Reject.
type Request struct {
	nc      net.Conn
	peer    netip.AddrPort
	params  []byte
	private []byte
	used    atomic.Bool
}

// Peer returns the requester's address as seen on the connection.
func (r *Request) Peer() netip.AddrPort { return r.peer }

// Params returns the requester's transport-parameter blob.
func (r *Request) Params() []byte { return r.params }

// PrivateData returns the requester's private data.
func (r *Request) PrivateData() []byte { return r.private }

// Accept replies (REP) with the local transport blob and private data and
// returns the established Conn once the requester has confirmed it with an
// RTU ("ready to use"), as in the IB CM. It does not return before the RTU
// arrives or ctx ends. Oversized private data gives ErrPrivateData and
// leaves the request unanswered; any other error closes it.
func (r *Request) Accept(ctx context.Context, params, private []byte) (*Conn, error) {
	if err := checkSizes(params, private); err != nil {
		return nil, err
	}
	if r.used.Swap(true) {
		return nil, fmt.Errorf("%w: request already answered", ErrClosed)
	}
	var f frame
	err := withCtx(ctx, r.nc, func() error {
		if _, err := r.nc.Write(hello(frame{typ: msgREP, params: params, private: private})); err != nil {
			return err
		}
		var err error
		f, err = readFrame(r.nc)
		return err
	})
	if err == nil && f.typ != msgRTU {
		err = fmt.Errorf("%w: got %v, want RTU", ErrProtocol, f.typ)
	}
	if err != nil {
		r.nc.Close()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("cm: requester closed before RTU: %w", err)
		}
		return nil, err
	}
	return newConn(r.nc), nil
}

// Reject refuses the request (REJ), sending private data to the requester.
// Oversized private data gives ErrPrivateData and leaves the request
// unanswered.
func (r *Request) Reject(private []byte) error {
	if err := checkSizes(nil, private); err != nil {
		return err
	}
	if r.used.Swap(true) {
		return fmt.Errorf("%w: request already answered", ErrClosed)
	}
	r.nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, err := r.nc.Write(hello(frame{typ: msgREJ, private: private}))
	if cerr := r.nc.Close(); err == nil {
		err = cerr
	}
	return err
}

// Reply is the accepting side's answer to Dial.
type Reply struct {
	// Params is the acceptor's transport-parameter blob.
	Params []byte
	// PrivateData is the acceptor's private data.
	PrivateData []byte
}

// Dial sends a connection request (REQ) carrying the local transport blob
// and private data to the listener at addr and waits for its answer. If the
// peer accepts (REP), Dial confirms with an RTU and returns the established
// Conn and the acceptor's Reply; the caller then connects its RDMA side with
// Reply.Params (the acceptor may start sending as soon as it has the RTU;
// reliable-connection retries cover the short gap). If the peer rejects,
// the error is a *RejectError (errors.Is(err, ErrRejected)). ctx bounds the
// whole exchange; if it ends, Dial returns ctx.Err().
func Dial(ctx context.Context, addr netip.AddrPort, params, private []byte) (*Conn, Reply, error) {
	if err := checkSizes(params, private); err != nil {
		return nil, Reply{}, err
	}
	var d net.Dialer
	nc, err := d.DialTCP(ctx, "tcp", netip.AddrPort{}, addr)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, Reply{}, cerr
		}
		return nil, Reply{}, fmt.Errorf("cm: dial %v: %w", addr, err)
	}
	var f frame
	err = withCtx(ctx, nc, func() error {
		if _, err := nc.Write(hello(frame{typ: msgREQ, params: params, private: private})); err != nil {
			return err
		}
		if err := readHello(nc); err != nil {
			return err
		}
		var err error
		if f, err = readFrame(nc); err != nil {
			return err
		}
		switch f.typ {
		case msgREP:
			_, err = nc.Write(appendFrame(nil, frame{typ: msgRTU}))
			return err
		case msgREJ:
			return &RejectError{Data: f.private}
		}
		return fmt.Errorf("%w: got %v, want REP or REJ", ErrProtocol, f.typ)
	})
	if err != nil {
		nc.Close()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: stream closed before REP", ErrProtocol)
		}
		return nil, Reply{}, err
	}
	return newConn(nc), Reply{Params: f.params, PrivateData: f.private}, nil
}

// Conn is an established connection's CM channel, kept open for the
// connection's lifetime to carry the disconnect (DREQ, answered by closing).
type Conn struct {
	nc      net.Conn
	done    chan struct{}
	err     error       // set before done is closed
	dreq    bool        // peer sent DREQ; set before done is closed
	closing atomic.Bool // local Disconnect started
	once    sync.Once
	discErr error
}

func newConn(nc net.Conn) *Conn {
	c := &Conn{nc: nc, done: make(chan struct{})}
	go c.watch()
	return c
}

// watch waits for the peer's DREQ or the channel's failure.
func (c *Conn) watch() {
	defer close(c.done)
	f, err := readFrame(c.nc)
	c.dreq = err == nil && f.typ == msgDREQ
	switch {
	case c.closing.Load():
		err = nil // our own Disconnect ends the channel cleanly
	case err == nil && f.typ == msgDREQ:
		err = nil
	case err == nil:
		err = fmt.Errorf("%w: unexpected %v on established connection", ErrProtocol, f.typ)
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("cm: channel closed without DREQ: %w", io.ErrUnexpectedEOF)
	default:
		err = fmt.Errorf("cm: channel broken: %w", err)
	}
	c.err = err
	c.nc.Close() // after a DREQ this is the DREP
}

// Disconnect tells the peer that the connection is over (DREQ), waits
// briefly for it to close its side, and closes the channel; Done is closed
// when it returns. It is idempotent and returns nil if the channel was
// already shut down.
func (c *Conn) Disconnect() error {
	c.once.Do(func() {
		c.closing.Store(true)
		select {
		case <-c.done: // peer disconnected or channel broke already
			return
		default:
		}
		c.nc.SetWriteDeadline(time.Now().Add(disconnectWait))
		_, err := c.nc.Write(appendFrame(nil, frame{typ: msgDREQ}))
		if tc, ok := c.nc.(*net.TCPConn); ok && err == nil {
			tc.CloseWrite() // fails only if the watcher closed nc already
		}
		c.nc.SetReadDeadline(time.Now().Add(disconnectWait))
		if err != nil {
			c.nc.Close()
		}
		<-c.done
		// net.ErrClosed: the watcher closed the channel, which went down
		// concurrently (peer DREQ or break).
		if err != nil && !c.dreq && !errors.Is(err, net.ErrClosed) {
			c.discErr = fmt.Errorf("cm: disconnect: %w", err)
		}
	})
	<-c.done
	return c.discErr
}

// Close is the same as Disconnect.
func (c *Conn) Close() error { return c.Disconnect() }

// Done returns a channel that is closed when the connection's CM channel is
// shut down: the peer disconnected, the channel broke, or Disconnect was
// called (libfabric's SHUTDOWN event). Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil until Done is closed. Then it returns nil after a clean
// disconnect (by the peer or by Disconnect) and otherwise the error that
// broke the channel.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}
