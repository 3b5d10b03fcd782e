package shmlink

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// build writes a frame of n bytes into b in several stores, a header
// field at a time then the payload, as the transport builds its frames
// in place.
func build(b []byte, n int, seq byte) {
	for off := 0; off < 54 && off < n; off += 6 {
		b[off], b[off+1], b[off+2], b[off+3] = seq, 1, 2, 3
	}
	for i := 54; i < n; i++ {
		b[i] = seq
	}
}

// BenchmarkPingPongInPlace bounces a 138-byte frame (a 64 B RDMA write)
// and a 62-byte answer (its ACK) between two spinning goroutines, each
// frame built in its slot (TxBuf, TxSubmit, Flush): ns/frame is half a
// round trip. Unlike BenchmarkPingPong it shows what the consumer's
// polling costs a producer still writing the slot.
func BenchmarkPingPongInPlace(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs")
	}
	r := newTestRegion(b, Config{Slots: 64})
	a, d := r.AppEnd(), r.DaemonEnd()
	views := make([][]byte, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		views := make([][]byte, 1)
		for spins := 0; ; spins++ {
			if d.RecvZC(views) == 1 {
				seq := views[0][0]
				d.ReleaseRx()
				build(d.TxBuf(), 62, seq)
				d.TxSubmit(62)
				d.Flush()
				continue
			}
			if spins%1024 == 0 {
				select {
				case <-stop:
					return
				default:
				}
			}
		}
	}()
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		build(a.TxBuf(), 138, byte(i))
		a.TxSubmit(138)
		a.Flush()
		for a.RecvZC(views) == 0 {
		}
		a.ReleaseRx()
	}
	el := time.Since(start)
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(el.Nanoseconds())/float64(2*b.N), "ns/frame")
}
