// Package pcaplink wraps any link.Link to record every frame it sends and
// every frame it receives in a packet capture, readable by tcpdump,
// Wireshark and gopacket's pcapgo: a debugging aid, because the kernel's
// packet taps never see softfabric's frames (XDP redirects received RoCEv2
// frames into AF_XDP sockets before the taps, and AF_XDP transmit bypasses
// them), and a way to record fixtures for tests.
//
// # Formats
//
// Two formats, both LINKTYPE_ETHERNET with nanosecond timestamps (wall
// clock):
//
//   - Pcap, the classic libpcap format (magic a1b23c4d, nanosecond
//     resolution). It has no field for direction: tell received frames from
//     sent ones by their addresses.
//   - PcapNG. Its enhanced packet blocks could carry the direction in the
//     epb_flags option, but pcapgo (gopacket v1.1.19) writes no packet
//     options and reads none back. The direction is recorded instead as the
//     interface: the section describes two interfaces with the same link
//     type and snap length, In (index 0, named "<Name>-rx", description
//     InDescription) for frames received and Out (index 1, "<Name>-tx",
//     OutDescription) for frames sent. In Wireshark, filter on
//     frame.interface_id == 0 (or 1), or frame.interface_name.
//
// # What is recorded
//
// Sent frames are those the wrapped link took (the count Send returns),
// recorded after its Send returned; received frames are recorded as the
// wrapped link hands them over, by Recv or RecvZC, before they are returned.
// The frames of one call share one timestamp, taken when the wrapped link's
// call returned. Frames are recorded in the order of the calls, which is the
// order the engine saw them.
//
// The recorder never changes what the link does: it passes every call
// through, with the wrapped link's results and errors, and exposes the same
// optional interfaces (link.Waiter, link.ZeroCopyReceiver) as the wrapped
// link, no more and no less (see Capture.Link). Its own failures stop the
// recording, never the link: the first write error is kept (Err), and the
// frames after it are counted as not recorded. So are the frames past
// Options.Limit, which bounds the file.
//
// Records go through a bufio.Writer. It is flushed when the limit is
// reached, when the engine goes idle (before a Wait of the wrapped link),
// when Options.FlushInterval has passed since the last flush, by Flush and
// by Close. Close does not close the writer given to Wrap.
//
// A Capture serialises its recording with a mutex, so Flush, Close, Err and
// Stats may be called from any goroutine; the link itself is used by one
// goroutine at a time, like the links it wraps. Recording a frame allocates
// nothing; it costs a copy into the buffer.
package pcaplink

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/link"
)

// Format is a capture file format.
type Format uint8

const (
	// Pcap is the classic libpcap format with nanosecond timestamps; it
	// records no direction.
	Pcap Format = iota
	// PcapNG is pcapng, with the direction recorded as the interface.
	PcapNG
)

func (f Format) String() string {
	switch f {
	case Pcap:
		return "pcap"
	case PcapNG:
		return "pcapng"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// FormatOf picks the format for a file name: PcapNG for a name ending in
// ".pcapng" (in any case), Pcap for any other.
func FormatOf(path string) Format {
	if strings.HasSuffix(strings.ToLower(path), ".pcapng") {
		return PcapNG
	}
	return Pcap
}

// Direction tells whether a frame was received or sent.
type Direction uint8

const (
	// Unknown is the direction of a frame in a capture that does not
	// record it (classic pcap).
	Unknown Direction = iota
	// In is a frame the wrapped link received.
	In
	// Out is a frame sent over the wrapped link.
	Out
)

func (d Direction) String() string {
	switch d {
	case In:
		return "in"
	case Out:
		return "out"
	}
	return "unknown"
}

// The descriptions of the two pcapng interfaces, by which a reader tells
// the direction of a frame (see the package comment).
const (
	InDescription  = "softfabric: frames received"
	OutDescription = "softfabric: frames sent"
)

// The pcapng interface indices of the two directions.
const (
	inInterface  = 0
	outInterface = 1
)

// Defaults for zero Options.
const (
	DefaultLimit         = 100_000
	DefaultName          = "softfabric"
	DefaultFlushInterval = 200 * time.Millisecond
	// MaxSnapLen is the snap length written in the file header when frames
	// are recorded whole: libpcap's largest, which any reader accepts.
	MaxSnapLen = 262144
)

// Options tune a Capture. The zero value records whole frames, up to
// DefaultLimit of them, in classic pcap.
type Options struct {
	Format Format
	// SnapLen is how many bytes of each frame are kept; 0 keeps whole
	// frames (up to MaxSnapLen bytes). The record still gives the frame's
	// full length.
	SnapLen int
	// Limit is how many frames are recorded at most; later frames are
	// counted but not written. 0 means DefaultLimit, a negative value no
	// limit.
	Limit int
	// Name names the interfaces of a pcapng file ("<Name>-rx" and
	// "<Name>-tx"); empty means DefaultName. Unused by classic pcap.
	Name string
	// Now is the clock of the timestamps; nil means time.Now.
	Now func() time.Time
	// FlushInterval is the longest time records stay in the buffer while
	// frames keep coming; 0 means DefaultFlushInterval.
	FlushInterval time.Duration
}

// Stats count the frames that passed.
type Stats struct {
	In          uint64 // frames received
	Out         uint64 // frames sent (taken by the wrapped link)
	Recorded    uint64 // frames written to the capture
	NotRecorded uint64 // frames not written: past Limit, after an error or after Close
}

// Capture records the frames passing over a wrapped link. Its Link method
// gives the link to use in place of the wrapped one.
type Capture struct {
	inner link.Link
	wait  link.Waiter           // the inner link's, or nil
	zc    link.ZeroCopyReceiver // the inner link's, or nil
	view  link.Link

	now      func() time.Time
	every    time.Duration
	snap     int
	limit    int64 // < 0: none
	mu       sync.Mutex
	bw       *bufio.Writer
	pw       *pcapgo.Writer   // classic pcap, or nil
	ng       *pcapgo.NgWriter // pcapng, or nil
	err      error            // the first write error: recording stopped
	closed   bool
	lastSync time.Time // the last flush
	stats    Stats
}

// Wrap returns a Capture recording in w, in the format o.Format, the frames
// sent and received over l. Give the engine c.Link(), which is l with the
// recording. The file header is written into the buffer at once.
func Wrap(l link.Link, w io.Writer, o Options) (*Capture, error) {
	if l == nil {
		return nil, errors.New("pcaplink: nil link")
	}
	if w == nil {
		return nil, errors.New("pcaplink: nil writer")
	}
	if o.Format != Pcap && o.Format != PcapNG {
		return nil, fmt.Errorf("pcaplink: unknown format %v", o.Format)
	}
	if o.SnapLen < 0 {
		return nil, fmt.Errorf("pcaplink: negative SnapLen %d", o.SnapLen)
	}
	if o.FlushInterval < 0 {
		return nil, fmt.Errorf("pcaplink: negative FlushInterval %v", o.FlushInterval)
	}
	snap := o.SnapLen
	if snap == 0 || snap > MaxSnapLen {
		snap = MaxSnapLen
	}
	limit := int64(o.Limit)
	if o.Limit == 0 {
		limit = DefaultLimit
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	c := &Capture{
		inner: l,
		now:   o.Now,
		every: o.FlushInterval,
		snap:  snap,
		limit: limit,
		bw:    bufio.NewWriterSize(w, 64<<10),
	}
	c.wait, _ = l.(link.Waiter)
	c.zc, _ = l.(link.ZeroCopyReceiver)
	switch {
	case c.wait != nil && c.zc != nil:
		c.view = waitZCLink{base{c}}
	case c.wait != nil:
		c.view = waitLink{base{c}}
	case c.zc != nil:
		c.view = zcLink{base{c}}
	default:
		c.view = base{c}
	}
	var err error
	switch o.Format {
	case Pcap:
		c.pw = pcapgo.NewWriterNanos(c.bw)
		err = c.pw.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet)
	case PcapNG:
		// The NgWriter writes into c.bw itself: bufio.NewWriter returns a
		// *bufio.Writer as it is when it is large enough.
		intf := func(suffix, desc string) pcapgo.NgInterface {
			return pcapgo.NgInterface{
				Name:        o.Name + suffix,
				Description: desc,
				OS:          runtime.GOOS,
				LinkType:    layers.LinkTypeEthernet,
				SnapLength:  uint32(snap),
			}
		}
		c.ng, err = pcapgo.NewNgWriterInterface(c.bw, intf("-rx", InDescription), pcapgo.NgWriterOptions{
			SectionInfo: pcapgo.NgSectionInfo{
				Hardware:    runtime.GOARCH,
				OS:          runtime.GOOS,
				Application: "softfabric (dataplane/link/pcaplink)",
			},
		})
		if err == nil {
			_, err = c.ng.AddInterface(intf("-tx", OutDescription))
		}
	}
	if err != nil {
		c.err = fmt.Errorf("pcaplink: writing the file header: %w", err)
	}
	c.lastSync = c.now()
	return c, nil
}

// Link is the wrapped link with the recording: a link.Link that is also a
// link.Waiter when the wrapped link is one, and a link.ZeroCopyReceiver when
// the wrapped link is one, recording the frames it lends.
func (c *Capture) Link() link.Link { return c.view }

// Err returns the error that stopped the recording, or nil.
func (c *Capture) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Stats returns the counters.
func (c *Capture) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Flush writes the buffered records to the writer. It returns the error
// that stopped the recording, if any.
func (c *Capture) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flush()
	return c.err
}

// Close flushes the buffered records and stops the recording: frames after
// it are counted as not recorded. It does not close the writer given to Wrap
// or the wrapped link. It returns the error that stopped the recording, if
// any.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.flush()
		c.closed = true
	}
	return c.err
}

// flush writes out the buffer, unless the recording has stopped.
func (c *Capture) flush() {
	if c.err != nil || c.closed {
		return
	}
	if err := c.bw.Flush(); err != nil {
		c.fail(err)
	}
	c.lastSync = c.now()
}

func (c *Capture) fail(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("pcaplink: recording stopped: %w", err)
	}
}

// record writes one frame; the caller holds c.mu.
func (c *Capture) record(d Direction, f []byte, ts time.Time) {
	if d == In {
		c.stats.In++
	} else {
		c.stats.Out++
	}
	if c.err != nil || c.closed || c.limit >= 0 && c.stats.Recorded >= uint64(c.limit) {
		c.stats.NotRecorded++
		return
	}
	n := min(len(f), c.snap)
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: n, Length: len(f)}
	var err error
	if c.ng != nil {
		ci.InterfaceIndex = inInterface
		if d == Out {
			ci.InterfaceIndex = outInterface
		}
		err = c.ng.WritePacket(ci, f[:n])
	} else {
		err = c.pw.WritePacket(ci, f[:n])
	}
	if err != nil {
		c.fail(err)
		c.stats.NotRecorded++
		return
	}
	c.stats.Recorded++
	if c.limit >= 0 && c.stats.Recorded == uint64(c.limit) {
		c.flush() // the file is complete: nothing more will come
	}
}

// pending reports whether records wait in the buffer to be flushed; the
// caller holds c.mu.
func (c *Capture) pending() bool {
	return c.err == nil && !c.closed && c.bw.Buffered() > 0
}

// done ends the recording of one call's frames: a flush when the interval
// has passed. The caller holds c.mu.
func (c *Capture) done(ts time.Time) {
	if c.pending() && ts.Sub(c.lastSync) >= c.every {
		c.flush()
	}
}

func (c *Capture) send(frames [][]byte) (int, error) {
	n, err := c.inner.Send(frames)
	if k := max(0, min(n, len(frames))); k > 0 {
		c.mu.Lock()
		ts := c.now()
		for _, f := range frames[:k] {
			c.record(Out, f, ts)
		}
		c.done(ts)
		c.mu.Unlock()
	}
	return n, err
}

func (c *Capture) recv(bufs [][]byte, sizes []int) (int, error) {
	n, err := c.inner.Recv(bufs, sizes)
	k := max(0, min(n, len(bufs), len(sizes)))
	c.mu.Lock()
	if k > 0 || c.pending() {
		ts := c.now()
		for i := range k {
			if s := sizes[i]; s >= 0 && s <= cap(bufs[i]) {
				c.record(In, bufs[i][:s], ts)
			}
		}
		c.done(ts)
	}
	c.mu.Unlock()
	return n, err
}

func (c *Capture) recvZC(views [][]byte) int {
	n := c.zc.RecvZC(views)
	k := max(0, min(n, len(views)))
	c.mu.Lock()
	if k > 0 || c.pending() {
		ts := c.now()
		for _, f := range views[:k] {
			c.record(In, f, ts)
		}
		c.done(ts)
	}
	c.mu.Unlock()
	return n
}

// waitIdle flushes what is buffered, the engine being idle, then waits in
// the wrapped link.
func (c *Capture) waitIdle(timeout time.Duration) error {
	c.mu.Lock()
	if c.pending() {
		c.flush()
	}
	c.mu.Unlock()
	return c.wait.Wait(timeout)
}

// The four views of a Capture, one for each combination of the optional
// interfaces the wrapped link may have.
type (
	base       struct{ c *Capture }
	waitLink   struct{ base }
	zcLink     struct{ base }
	waitZCLink struct{ base }
)

var (
	_ link.Link             = base{}
	_ link.Waiter           = waitLink{}
	_ link.ZeroCopyReceiver = zcLink{}
	_ link.Waiter           = waitZCLink{}
	_ link.ZeroCopyReceiver = waitZCLink{}
)

func (b base) Send(frames [][]byte) (int, error)            { return b.c.send(frames) }
func (b base) Recv(bufs [][]byte, sizes []int) (int, error) { return b.c.recv(bufs, sizes) }
func (b base) MaxFrame() int                                { return b.c.inner.MaxFrame() }

func (l waitLink) Wait(timeout time.Duration) error { return l.c.waitIdle(timeout) }

func (l zcLink) RecvZC(views [][]byte) int { return l.c.recvZC(views) }
func (l zcLink) ReleaseRx()                { l.c.zc.ReleaseRx() }

func (l waitZCLink) Wait(timeout time.Duration) error { return l.c.waitIdle(timeout) }
func (l waitZCLink) RecvZC(views [][]byte) int        { return l.c.recvZC(views) }
func (l waitZCLink) ReleaseRx()                       { l.c.zc.ReleaseRx() }
