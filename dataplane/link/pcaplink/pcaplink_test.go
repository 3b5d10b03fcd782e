package pcaplink_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
)

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
)

// udpFrame builds an Ethernet/IPv4/UDP frame from src to dst with source
// port 1000+i and a payload of n bytes derived from i.
func udpFrame(t testing.TB, i int, src, dst net.HardwareAddr, n int) []byte {
	t.Helper()
	payload := make([]byte, n)
	for j := range payload {
		payload[j] = byte(i*7 + j)
	}
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP,
		SrcIP: net.IP{198, 18, 0, src[5]}, DstIP: net.IP{198, 18, 0, dst[5]}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(1000 + i), DstPort: 9}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// record is a frame read back from a capture.
type record struct {
	data []byte
	ci   gopacket.CaptureInfo
	dir  pcaplink.Direction
}

// readBack reads a capture with pcapgo, the direction from the pcapng
// interface.
func readBack(t testing.TB, b []byte, f pcaplink.Format) []record {
	t.Helper()
	var recs []record
	switch f {
	case pcaplink.Pcap:
		r, err := pcapgo.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("link type %v", r.LinkType())
		}
		for {
			data, ci, err := r.ReadPacketData()
			if err == io.EOF {
				return recs
			}
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, record{data, ci, pcaplink.Unknown})
		}
	case pcaplink.PcapNG:
		r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatal(err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("link type %v", r.LinkType())
		}
		for {
			data, ci, err := r.ReadPacketData()
			if err == io.EOF {
				if r.NInterfaces() != 2 {
					t.Fatalf("%d interfaces, want 2", r.NInterfaces())
				}
				return recs
			}
			if err != nil {
				t.Fatal(err)
			}
			intf, err := r.Interface(ci.InterfaceIndex)
			if err != nil {
				t.Fatal(err)
			}
			var d pcaplink.Direction
			switch {
			case ci.InterfaceIndex == 0 && intf.Description == pcaplink.InDescription && intf.Name == "test-rx":
				d = pcaplink.In
			case ci.InterfaceIndex == 1 && intf.Description == pcaplink.OutDescription && intf.Name == "test-tx":
				d = pcaplink.Out
			default:
				t.Fatalf("frame %d on interface %d %+v", len(recs), ci.InterfaceIndex, intf)
			}
			recs = append(recs, record{data, ci, d})
		}
	}
	t.Fatalf("format %v", f)
	return nil
}

// want is a frame expected in a capture.
type want struct {
	data []byte
	ts   time.Time
	dir  pcaplink.Direction
}

func check(t *testing.T, recs []record, wants []want, f pcaplink.Format, snap int) {
	t.Helper()
	if len(recs) != len(wants) {
		t.Fatalf("%d frames recorded, want %d", len(recs), len(wants))
	}
	for i, w := range wants {
		r := recs[i]
		n := len(w.data)
		if snap > 0 {
			n = min(n, snap)
		}
		if r.ci.Length != len(w.data) || r.ci.CaptureLength != n || !bytes.Equal(r.data, w.data[:n]) {
			t.Fatalf("frame %d: length %d, captured %d (%x...), want %d, %d", i, r.ci.Length, r.ci.CaptureLength, r.data[:min(len(r.data), 16)], len(w.data), n)
		}
		if !r.ci.Timestamp.Equal(w.ts) {
			t.Fatalf("frame %d: timestamp %v, want %v", i, r.ci.Timestamp, w.ts)
		}
		wd := w.dir
		if f == pcaplink.Pcap {
			wd = pcaplink.Unknown
		}
		if r.dir != wd {
			t.Fatalf("frame %d: direction %v, want %v", i, r.dir, wd)
		}
	}
}

// clock is a settable clock for Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newClock() *clock {
	// Nanoseconds that survive only a nanosecond-resolution format.
	return &clock{t: time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)}
}

// TestRecordsBothDirections sends frames both ways over a memlink pair whose
// end a is wrapped, and reads the capture back with pcapgo: every frame a
// sent and received, in order, whole, with its timestamp and (pcapng) its
// direction, and decodable by gopacket's layers.
func TestRecordsBothDirections(t *testing.T) {
	for _, f := range []pcaplink.Format{pcaplink.Pcap, pcaplink.PcapNG} {
		t.Run(f.String(), func(t *testing.T) {
			a, b := memlink.NewPair(memlink.Config{})
			var out bytes.Buffer
			clk := newClock()
			c, err := pcaplink.Wrap(a, &out, pcaplink.Options{Format: f, Name: "test", Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			l := c.Link()
			if l.MaxFrame() != a.MaxFrame() {
				t.Fatalf("MaxFrame %d, want %d", l.MaxFrame(), a.MaxFrame())
			}
			var wants []want
			bufs, sizes := make([][]byte, 8), make([]int, 8)
			for i := range bufs {
				bufs[i] = make([]byte, l.MaxFrame())
			}
			sizes0 := []int{18, 1000, 8960, 0, 1472}
			k := 0
			for round := range 5 {
				clk.t = clk.t.Add(1500*time.Microsecond + 7)
				var batch [][]byte
				for j := 0; j <= round%3; j++ {
					batch = append(batch, udpFrame(t, k, macA, macB, sizes0[(k+round)%len(sizes0)]))
					k++
				}
				if n, err := l.Send(batch); n != len(batch) || err != nil {
					t.Fatalf("Send: %d, %v", n, err)
				}
				for _, fr := range batch {
					wants = append(wants, want{fr, clk.t, pcaplink.Out})
				}
				n, err := b.Recv(bufs, sizes)
				if n != len(batch) || err != nil {
					t.Fatalf("b received %d, %v; want %d", n, err, len(batch))
				}
				var replies [][]byte
				for j := range n {
					replies = append(replies, udpFrame(t, 500+k+j, macB, macA, sizes[j]/2))
				}
				if _, err := b.Send(replies); err != nil {
					t.Fatal(err)
				}
				clk.t = clk.t.Add(time.Second + 1) // past the flush interval too
				n, err = l.Recv(bufs, sizes)
				if n != len(replies) || err != nil {
					t.Fatalf("Recv: %d, %v; want %d", n, err, len(replies))
				}
				for j := range n {
					if !bytes.Equal(bufs[j][:sizes[j]], replies[j]) {
						t.Fatalf("received frame %d altered", j)
					}
					wants = append(wants, want{replies[j], clk.t, pcaplink.In})
				}
				if n, err := l.Recv(bufs, sizes); n != 0 || err != nil {
					t.Fatalf("Recv of nothing: %d, %v", n, err)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			recs := readBack(t, out.Bytes(), f)
			check(t, recs, wants, f, 0)
			for i, r := range recs {
				p := gopacket.NewPacket(r.data, layers.LayerTypeEthernet, gopacket.Default)
				if el := p.ErrorLayer(); el != nil {
					t.Fatalf("frame %d: %v", i, el.Error())
				}
				udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
				if !ok || udp.DstPort != 9 || int(udp.Length) != 8+len(udp.Payload) || !bytes.Equal(udp.Payload, wants[i].data[42:42+len(udp.Payload)]) {
					t.Fatalf("frame %d: UDP layer %v", i, p)
				}
			}
			s := c.Stats()
			if s.In+s.Out != uint64(len(wants)) || s.Recorded != uint64(len(wants)) || s.NotRecorded != 0 {
				t.Fatalf("stats %+v, %d frames", s, len(wants))
			}
			if f == pcaplink.Pcap {
				// The classic header: nanosecond magic, whole frames, Ethernet.
				h := out.Bytes()[:24]
				if !bytes.Equal(h[:4], []byte{0x4d, 0x3c, 0xb2, 0xa1}) || !bytes.Equal(h[16:24], []byte{0, 0, 4, 0, 1, 0, 0, 0}) {
					t.Fatalf("file header %x", h)
				}
			}
		})
	}
}

// TestSnapLen keeps the first SnapLen bytes of each frame and its full
// length.
func TestSnapLen(t *testing.T) {
	for _, f := range []pcaplink.Format{pcaplink.Pcap, pcaplink.PcapNG} {
		t.Run(f.String(), func(t *testing.T) {
			a, b := memlink.NewPair(memlink.Config{})
			var out bytes.Buffer
			clk := newClock()
			c, err := pcaplink.Wrap(a, &out, pcaplink.Options{Format: f, Name: "test", SnapLen: 64, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			var wants []want
			var batch [][]byte
			for i, n := range []int{10, 22, 100, 4000} {
				batch = append(batch, udpFrame(t, i, macA, macB, n))
				wants = append(wants, want{batch[i], clk.t, pcaplink.Out})
			}
			if n, err := c.Link().Send(batch); n != len(batch) || err != nil {
				t.Fatal(n, err)
			}
			bufs, sizes := [][]byte{make([]byte, 9018)}, []int{0}
			for _, want := range batch {
				if n, _ := b.Recv(bufs, sizes); n != 1 || !bytes.Equal(bufs[0][:sizes[0]], want) {
					t.Fatal("frame altered")
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			check(t, readBack(t, out.Bytes(), f), wants, f, 64)
			if f == pcaplink.Pcap {
				r, _ := pcapgo.NewReader(bytes.NewReader(out.Bytes()))
				if r.Snaplen() != 64 {
					t.Fatalf("snap length %d in the header", r.Snaplen())
				}
			}
		})
	}
}

// TestLimit records the first Limit frames, flushes them at once, and
// counts the rest; the link carries everything.
func TestLimit(t *testing.T) {
	a, b := memlink.NewPair(memlink.Config{})
	var out bytes.Buffer
	c, err := pcaplink.Wrap(a, &out, pcaplink.Options{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	for i := range 12 {
		batch = append(batch, udpFrame(t, i, macA, macB, 100))
	}
	if n, err := c.Link().Send(batch[:3]); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	if out.Len() != 0 {
		t.Fatalf("%d bytes written before the limit or the flush interval", out.Len())
	}
	if n, err := c.Link().Send(batch[3:]); n != 9 || err != nil {
		t.Fatal(n, err)
	}
	// Flushed when the limit was reached, before any Close.
	recs := readBack(t, out.Bytes(), pcaplink.Pcap)
	if len(recs) != 5 {
		t.Fatalf("%d frames recorded, want 5", len(recs))
	}
	for i, r := range recs {
		if !bytes.Equal(r.data, batch[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	bufs, sizes := make([][]byte, 16), make([]int, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 9018)
	}
	if n, err := b.Recv(bufs, sizes); n != 12 || err != nil {
		t.Fatalf("b received %d, %v", n, err)
	}
	if s := c.Stats(); s.Out != 12 || s.Recorded != 5 || s.NotRecorded != 7 {
		t.Fatalf("stats %+v", s)
	}
	size := out.Len()
	if err := c.Close(); err != nil || out.Len() != size {
		t.Fatalf("Close: %v, %d bytes more", err, out.Len()-size)
	}
}

// failWriter fails every write after the first ok bytes, each time with a
// new error.
type failWriter struct {
	ok   int
	n    int
	errs []error
}

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n+len(p) <= w.ok {
		w.n += len(p)
		return len(p), nil
	}
	err := fmt.Errorf("disk full #%d", len(w.errs))
	w.errs = append(w.errs, err)
	return 0, err
}

// TestWriteErrorStopsRecordingNotTheLink makes the writer fail: the link
// still carries every frame, Err reports the first error, and the frames
// after it are counted as not recorded.
func TestWriteErrorStopsRecordingNotTheLink(t *testing.T) {
	for _, f := range []pcaplink.Format{pcaplink.Pcap, pcaplink.PcapNG} {
		t.Run(f.String(), func(t *testing.T) {
			a, b := memlink.NewPair(memlink.Config{})
			w := &failWriter{ok: 10_000}
			c, err := pcaplink.Wrap(a, w, pcaplink.Options{Format: f})
			if err != nil {
				t.Fatal(err)
			}
			l := c.Link()
			bufs, sizes := make([][]byte, 64), make([]int, 64)
			for i := range bufs {
				bufs[i] = make([]byte, 9018)
			}
			const frames = 200 // 200 kB: the 64 kB buffer goes out, and fails
			for i := range frames {
				fr := udpFrame(t, i, macA, macB, 1000)
				if n, err := l.Send([][]byte{fr}); n != 1 || err != nil {
					t.Fatalf("Send %d: %d, %v", i, n, err)
				}
				if n, err := b.Recv(bufs, sizes); n != 1 || err != nil || !bytes.Equal(bufs[0][:sizes[0]], fr) {
					t.Fatalf("b received %d, %v", n, err)
				}
				if _, err := b.Send([][]byte{fr}); err != nil {
					t.Fatal(err)
				}
				if n, err := l.Recv(bufs, sizes); n != 1 || err != nil {
					t.Fatalf("Recv %d: %d, %v", i, n, err)
				}
			}
			if len(w.errs) == 0 {
				t.Fatal("the writer never failed")
			}
			err = c.Err()
			if !errors.Is(err, w.errs[0]) {
				t.Fatalf("Err() = %v, want the first error %v", err, w.errs[0])
			}
			if err := c.Flush(); !errors.Is(err, w.errs[0]) {
				t.Fatalf("Flush: %v", err)
			}
			if err := c.Close(); !errors.Is(err, w.errs[0]) {
				t.Fatalf("Close: %v", err)
			}
			if len(w.errs) != 1 {
				t.Fatalf("the writer was tried %d times after failing", len(w.errs)-1)
			}
			s := c.Stats()
			if s.In != frames || s.Out != frames || s.NotRecorded == 0 || s.Recorded+s.NotRecorded != 2*frames {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// fake is an inner link with frames to lend and hooks to watch the calls.
type fake struct {
	frames   [][]byte // waiting frames, handed out by Recv and RecvZC
	sent     [][]byte
	take     int // how many frames Send takes; -1 all
	sendErr  error
	recvErr  error
	waitErr  error
	waited   []time.Duration
	lent     int
	released int
}

func (f *fake) MaxFrame() int { return 2048 }

func (f *fake) Send(frames [][]byte) (int, error) {
	n := len(frames)
	if f.take >= 0 {
		n = min(n, f.take)
	}
	for _, fr := range frames[:n] {
		f.sent = append(f.sent, bytes.Clone(fr))
	}
	return n, f.sendErr
}

func (f *fake) Recv(bufs [][]byte, sizes []int) (int, error) {
	n := min(len(bufs), len(f.frames))
	for i := range n {
		sizes[i] = copy(bufs[i][:cap(bufs[i])], f.frames[i])
	}
	f.frames = f.frames[n:]
	return n, f.recvErr
}

func (f *fake) wait(d time.Duration) error {
	f.waited = append(f.waited, d)
	return f.waitErr
}

func (f *fake) recvZC(views [][]byte) int {
	n := min(len(views), len(f.frames))
	copy(views, f.frames[:n])
	f.frames = f.frames[n:]
	f.lent += n
	return n
}

func (f *fake) releaseRx() { f.released++ }

type (
	fakeWait   struct{ *fake }
	fakeZC     struct{ *fake }
	fakeWaitZC struct{ *fake }
)

func (f fakeWait) Wait(d time.Duration) error   { return f.wait(d) }
func (f fakeZC) RecvZC(v [][]byte) int          { return f.recvZC(v) }
func (f fakeZC) ReleaseRx()                     { f.releaseRx() }
func (f fakeWaitZC) Wait(d time.Duration) error { return f.wait(d) }
func (f fakeWaitZC) RecvZC(v [][]byte) int      { return f.recvZC(v) }
func (f fakeWaitZC) ReleaseRx()                 { f.releaseRx() }

// TestOptionalInterfaces checks that the capture's link is a link.Waiter and
// a link.ZeroCopyReceiver exactly when the wrapped link is, that the calls
// pass through with their results and errors, that lent frames are lent
// in place and recorded, and that Wait flushes what is buffered.
func TestOptionalInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wrap     func(*fake) link.Link
		wait, zc bool
	}{
		{"plain", func(f *fake) link.Link { return f }, false, false},
		{"waiter", func(f *fake) link.Link { return fakeWait{f} }, true, false},
		{"zerocopy", func(f *fake) link.Link { return fakeZC{f} }, false, true},
		{"both", func(f *fake) link.Link { return fakeWaitZC{f} }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{take: -1}
			var out bytes.Buffer
			clk := newClock()
			c, err := pcaplink.Wrap(tc.wrap(f), &out, pcaplink.Options{Format: pcaplink.PcapNG, Name: "test", Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			l := c.Link()
			w, isWait := l.(link.Waiter)
			zc, isZC := l.(link.ZeroCopyReceiver)
			if isWait != tc.wait || isZC != tc.zc {
				t.Fatalf("Waiter %v, ZeroCopyReceiver %v; want %v, %v", isWait, isZC, tc.wait, tc.zc)
			}
			if l.MaxFrame() != 2048 {
				t.Fatal("MaxFrame")
			}
			var wants []want

			// Send: the count and the error of the wrapped link; only the
			// frames it took are recorded.
			f.take, f.sendErr = 2, errors.New("ring full")
			batch := [][]byte{udpFrame(t, 1, macA, macB, 10), udpFrame(t, 2, macA, macB, 20), udpFrame(t, 3, macA, macB, 30)}
			if n, err := l.Send(batch); n != 2 || err != f.sendErr {
				t.Fatalf("Send: %d, %v", n, err)
			}
			wants = append(wants, want{batch[0], clk.t, pcaplink.Out}, want{batch[1], clk.t, pcaplink.Out})

			// Recv: the same.
			clk.t = clk.t.Add(time.Millisecond)
			in := udpFrame(t, 4, macB, macA, 40)
			f.frames = [][]byte{in}
			f.recvErr = errors.New("recv failed")
			bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048)}, []int{0, 0}
			if n, err := l.Recv(bufs, sizes); n != 1 || err != f.recvErr || !bytes.Equal(bufs[0][:sizes[0]], in) {
				t.Fatalf("Recv: %d, %v", n, err)
			}
			wants = append(wants, want{in, clk.t, pcaplink.In})

			if isZC {
				clk.t = clk.t.Add(time.Millisecond)
				f.frames = [][]byte{udpFrame(t, 5, macB, macA, 50), udpFrame(t, 6, macB, macA, 60)}
				first := &f.frames[0][0]
				views := make([][]byte, 4)
				if n := zc.RecvZC(views); n != 2 || &views[0][0] != first {
					t.Fatalf("RecvZC: %d, views not lent in place", n)
				}
				wants = append(wants, want{views[0], clk.t, pcaplink.In}, want{views[1], clk.t, pcaplink.In})
				zc.ReleaseRx()
				if f.lent != 2 || f.released != 1 {
					t.Fatalf("lent %d, released %d", f.lent, f.released)
				}
			}
			if isWait {
				before := out.Len()
				f.waitErr = errors.New("poll failed")
				if err := w.Wait(3 * time.Millisecond); err != f.waitErr {
					t.Fatalf("Wait: %v", err)
				}
				if len(f.waited) != 1 || f.waited[0] != 3*time.Millisecond {
					t.Fatalf("waited %v", f.waited)
				}
				if out.Len() == before {
					t.Fatal("Wait did not flush the records first")
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			check(t, readBack(t, out.Bytes(), pcaplink.PcapNG), wants, pcaplink.PcapNG, 0)
		})
	}
}

// TestFlushInterval writes the records out once FlushInterval has passed,
// on the next call, even one that moves no frame.
func TestFlushInterval(t *testing.T) {
	f := &fake{take: -1}
	var out bytes.Buffer
	clk := newClock()
	c, err := pcaplink.Wrap(f, &out, pcaplink.Options{Now: clk.now, FlushInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Link()
	if _, err := l.Send([][]byte{udpFrame(t, 1, macA, macB, 10)}); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	clk.t = clk.t.Add(9 * time.Millisecond)
	if _, err := l.Recv(bufs, sizes); err != nil || out.Len() != 0 {
		t.Fatalf("flushed early: %d bytes, %v", out.Len(), err)
	}
	clk.t = clk.t.Add(time.Millisecond)
	if _, err := l.Recv(bufs, sizes); err != nil || len(readBack(t, out.Bytes(), pcaplink.Pcap)) != 1 {
		t.Fatalf("not flushed after the interval: %d bytes, %v", out.Len(), err)
	}
}

// TestClose stops the recording; the link carries on.
func TestClose(t *testing.T) {
	f := &fake{take: -1}
	var out bytes.Buffer
	c, err := pcaplink.Wrap(f, &out, pcaplink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := c.Link()
	if _, err := l.Send([][]byte{udpFrame(t, 1, macA, macB, 10)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	size := out.Len()
	if n, err := l.Send([][]byte{udpFrame(t, 2, macA, macB, 10)}); n != 1 || err != nil || len(f.sent) != 2 {
		t.Fatalf("Send after Close: %d, %v", n, err)
	}
	if err := c.Close(); err != nil || out.Len() != size {
		t.Fatalf("second Close: %v, %d more bytes", err, out.Len()-size)
	}
	if s := c.Stats(); s.Out != 2 || s.Recorded != 1 || s.NotRecorded != 1 {
		t.Fatalf("stats %+v", s)
	}
	if len(readBack(t, out.Bytes(), pcaplink.Pcap)) != 1 {
		t.Fatal("want one frame")
	}
}

// TestConcurrentFlush flushes and reads the counters from another goroutine
// while frames pass (for -race).
func TestConcurrentFlush(t *testing.T) {
	a, b := memlink.NewPair(memlink.Config{})
	c, err := pcaplink.Wrap(a, io.Discard, pcaplink.Options{Format: pcaplink.PcapNG})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Flush()
			_ = c.Stats()
		}
	})
	fr := udpFrame(t, 1, macA, macB, 100)
	bufs, sizes := [][]byte{make([]byte, 9018)}, []int{0}
	for range 2000 {
		if _, err := c.Link().Send([][]byte{fr}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Recv(bufs, sizes); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Recorded != 2000 {
		t.Fatalf("stats %+v", s)
	}
}

// TestNoAllocs: recording a batch allocates nothing.
func TestNoAllocs(t *testing.T) {
	for _, f := range []pcaplink.Format{pcaplink.Pcap, pcaplink.PcapNG} {
		inner := &sink{}
		c, err := pcaplink.Wrap(inner, io.Discard, pcaplink.Options{Format: f, Limit: -1})
		if err != nil {
			t.Fatal(err)
		}
		l := c.Link()
		batch := make([][]byte, link.IdealBatch)
		for i := range batch {
			batch[i] = udpFrame(t, i, macA, macB, 1000)
		}
		bufs, sizes := make([][]byte, link.IdealBatch), make([]int, link.IdealBatch)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		inner.frames = batch
		allocs := testing.AllocsPerRun(100, func() {
			if n, err := l.Send(batch); n != len(batch) || err != nil {
				t.Fatal(n, err)
			}
			if n, err := l.Recv(bufs, sizes); n != len(batch) || err != nil {
				t.Fatal(n, err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%v: %v allocations per batch each way", f, allocs)
		}
	}
}

// sink takes every frame and always has frames to receive.
type sink struct{ frames [][]byte }

func (s *sink) MaxFrame() int                     { return 2048 }
func (s *sink) Send(frames [][]byte) (int, error) { return len(frames), nil }
func (s *sink) Recv(bufs [][]byte, sizes []int) (int, error) {
	n := min(len(bufs), len(s.frames))
	for i := range n {
		sizes[i] = copy(bufs[i][:cap(bufs[i])], s.frames[i])
	}
	return n, nil
}

func TestWrapErrors(t *testing.T) {
	f := &fake{take: -1}
	for _, tc := range []struct {
		l link.Link
		w io.Writer
		o pcaplink.Options
	}{
		{nil, io.Discard, pcaplink.Options{}},
		{f, nil, pcaplink.Options{}},
		{f, io.Discard, pcaplink.Options{Format: 7}},
		{f, io.Discard, pcaplink.Options{SnapLen: -1}},
		{f, io.Discard, pcaplink.Options{FlushInterval: -1}},
	} {
		if _, err := pcaplink.Wrap(tc.l, tc.w, tc.o); err == nil {
			t.Errorf("Wrap(%v, %v, %+v) succeeded", tc.l, tc.w, tc.o)
		}
	}
}

func TestFormatOf(t *testing.T) {
	for path, want := range map[string]pcaplink.Format{
		"/tmp/x.pcapng": pcaplink.PcapNG,
		"/tmp/X.PCAPNG": pcaplink.PcapNG,
		"/tmp/x.pcap":   pcaplink.Pcap,
		"x":             pcaplink.Pcap,
	} {
		if got := pcaplink.FormatOf(path); got != want {
			t.Errorf("FormatOf(%q) = %v, want %v", path, got, want)
		}
	}
}
