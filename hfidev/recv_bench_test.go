package hfidev

import (
	"testing"
	"time"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// BenchmarkRecvPoll is the receive side alone: Poll and Release of packets
// already in the queue, timed by hand as rx-ns/pkt (ns/op also counts the
// PIO sends that refill the queue between batches).
func BenchmarkRecvPoll(b *testing.B) {
	for _, n := range []int{0, 256, 4096} {
		b.Run(sizeName(n), func(b *testing.B) {
			l := newLink(b, abi.ChipWFR, nil)
			r := l.b.Receiver()
			hdr := make([]byte, abi.Header9BSize)
			kdethHeader(hdr, l.a, l.b, 0, n)
			payload := pattern(n, 1)
			batch := int(l.b.Info.RcvHdrqCnt) / 2
			var rx time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				k := min(batch, b.N-done)
				for range k {
					sendPIO(b, l.a, 0, hdr, payload)
				}
				t0 := time.Now()
				for range k {
					p, ok := r.Poll()
					if !ok || p.Err != nil {
						b.Fatal("lost a packet")
					}
					r.Release()
				}
				rx += time.Since(t0)
				done += k
			}
			b.ReportMetric(float64(rx.Nanoseconds())/float64(b.N), "rx-ns/pkt")
		})
	}
}

// BenchmarkPIOToRecv is one packet through both sides of the model: PIO
// send on unit A (the model assembles it and the wire delivers it into
// B's RcvHdrQ and eager buffer), then Poll and Release on B.
func BenchmarkPIOToRecv(b *testing.B) {
	for _, n := range []int{0, 256, 4096} {
		b.Run(sizeName(n), func(b *testing.B) {
			l := newLink(b, abi.ChipWFR, nil)
			r := l.b.Receiver()
			hdr := make([]byte, abi.Header9BSize)
			kdethHeader(hdr, l.a, l.b, 0, n)
			payload := pattern(n, 1)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				sendPIO(b, l.a, 0, hdr, payload)
				if _, ok := r.Poll(); !ok {
					b.Fatal("lost a packet")
				}
				r.Release()
			}
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1024:
		return itoa(n/1024) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
