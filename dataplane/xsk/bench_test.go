package xsk

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	bpflink "github.com/cilium/ebpf/link"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/softfabric/softfabric/internal/udpbatch"
)

// window bounds the frames in flight between sender and receiver in the
// benchmarks, so that they measure the path rather than the rx ring or
// socket buffer overflowing: well under the 2048-entry rx ring and the
// default UDP receive buffer.
const window = 1024

// report turns a run into ns/frame and frames/s over what was received.
func report(b *testing.B, start time.Time, sent, received int64) {
	el := time.Since(start)
	if received == 0 {
		b.Fatal("nothing received")
	}
	b.ReportMetric(float64(el.Nanoseconds())/float64(received), "ns/frame")
	b.ReportMetric(float64(received)/el.Seconds(), "frames/s")
	b.ReportMetric(100*float64(sent-received)/float64(sent), "%lost")
	b.ReportMetric(0, "ns/op")
}

// pump sends n frames (cycling through frames) from s to rx, with a
// receiving goroutine that sleeps in Wait when idle and at most window
// frames in flight, and returns how many were sent and received.
func pump(tb testing.TB, s, rx *Socket, frames [][]byte, n int) (sent, received int64) {
	var got atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, link.IdealBatch)
		for i := range bufs {
			bufs[i] = make([]byte, rx.MaxFrame())
		}
		sizes := make([]int, len(bufs))
		for {
			k, err := rx.Recv(bufs, sizes)
			if err != nil {
				tb.Error(err)
				return
			}
			if k > 0 {
				got.Add(int64(k))
				continue
			}
			select {
			case <-stop:
				return
			default:
			}
			if err := rx.Wait(10 * time.Millisecond); err != nil && !errors.Is(err, ErrTimeout) {
				tb.Error(err)
				return
			}
		}
	}()
	for sent < int64(n) {
		if sent-got.Load() > window {
			continue
		}
		k := min(int64(len(frames)), int64(n)-sent)
		m, err := s.Send(frames[:k])
		if err != nil {
			tb.Fatal(err)
		}
		sent += int64(m)
	}
	for deadline := time.Now().Add(time.Second); got.Load() < sent && time.Now().Before(deadline); {
		time.Sleep(10 * time.Microsecond)
	}
	close(stop)
	<-done
	return sent, got.Load()
}

// BenchmarkXSK64 sends 64-byte frames from A's AF_XDP socket to B's, in
// batches of link.IdealBatch (see pump), with the XDP programs attached in
// generic and in native mode.
func BenchmarkXSK64(b *testing.B) {
	for _, mode := range []bpflink.XDPAttachFlags{bpflink.XDPGenericMode, bpflink.XDPDriverMode} {
		b.Run(modeName(mode), func(b *testing.B) {
			a, r := newEnv(b, envOptions{queues: 1, mode: mode})
			s, rx := a.socks[0], r.socks[0]
			frames := make([][]byte, link.IdealBatch)
			for i := range frames {
				frames[i] = udpFrame(make([]byte, 64), a.h.MAC, r.h.MAC, 1, uint32(i), 64)
			}
			b.ResetTimer()
			start := time.Now()
			sent, received := pump(b, s, rx, frames, b.N)
			report(b, start, sent, received)
			b.StopTimer()
		})
	}
}

// BenchmarkUDP64 is the baseline: the same 64-byte frames (22 bytes of UDP
// payload) through plain UDP sockets of the kernel stack, between the same
// kind of namespaces with no XDP program, one syscall per frame and, for
// batch, sendmmsg/recvmmsg of link.IdealBatch.
func BenchmarkUDP64(b *testing.B) {
	for _, batch := range []bool{false, true} {
		name := "write"
		if batch {
			name = "mmsg"
		}
		b.Run(name, func(b *testing.B) {
			p := netnstest.NewPair(b, netnstest.Options{Queues: 1})
			var rc, sc *net.UDPConn
			if err := p.B.Do(func() (err error) {
				rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 9999})
				return err
			}); err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			if err := p.A.Do(func() (err error) {
				sc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(198, 18, 0, 2), Port: 9999})
				return err
			}); err != nil {
				b.Fatal(err)
			}
			defer sc.Close()
			_ = rc.SetReadBuffer(4 << 20)
			payload := make([]byte, 64-42)
			var received atomic.Int64
			done := make(chan struct{})
			rb, err := udpbatch.New(rc, link.IdealBatch, 2048)
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				defer close(done)
				buf := make([]byte, 2048)
				for {
					if batch {
						// recvmmsg, sleeping in the poller while
						// nothing waits: a spinning receiver takes
						// the CPU the sender and the kernel need
						// on a small machine.
						n, err := rb.RecvWait()
						if err != nil {
							return
						}
						received.Add(int64(n))
					} else {
						if _, err := rc.Read(buf); err != nil {
							return
						}
						received.Add(1)
					}
				}
			}()
			sb, err := udpbatch.New(sc, link.IdealBatch, 2048)
			if err != nil {
				b.Fatal(err)
			}
			out := make([][]byte, link.IdealBatch)
			for i := range out {
				out[i] = payload
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			sent := int64(0)
			for sent < int64(b.N) {
				if sent-received.Load() > window {
					continue
				}
				if batch {
					k := min(int64(len(out)), int64(b.N)-sent)
					n, err := sb.Send(out[:k])
					if err != nil {
						b.Fatal(err)
					}
					sent += int64(n)
				} else {
					if _, err := sc.Write(payload); err != nil {
						b.Fatal(err)
					}
					sent++
				}
			}
			for deadline := time.Now().Add(time.Second); received.Load() < sent && time.Now().Before(deadline); {
				time.Sleep(10 * time.Microsecond)
			}
			report(b, start, sent, received.Load())
			b.StopTimer()
			rc.Close()
			<-done
		})
	}
}

// BenchmarkEmptyPoll: what a polling loop pays for each look at an idle
// socket (RecvZC finding nothing), most of what a spinning worker does.
func BenchmarkEmptyPoll(b *testing.B) {
	_, e := newEnv(b, envOptions{queues: 1})
	s := e.socks[0]
	views := make([][]byte, link.IdealBatch)
	b.ReportAllocs()
	for b.Loop() {
		if s.RecvZC(views) != 0 {
			b.Fatal("a frame on an idle socket")
		}
	}
}
