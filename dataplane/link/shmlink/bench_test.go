package shmlink

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/dataplane/link"
)

// BenchmarkSendRecv64 sends batches of 64 frames of 64 bytes and receives
// them, from one goroutine.
func BenchmarkSendRecv64(b *testing.B) {
	r := newTestRegion(b, Config{})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	frames := make([][]byte, link.IdealBatch)
	for i := range frames {
		frames[i] = make([]byte, 64)
	}
	in, sizes := bufs(link.IdealBatch, 2048)
	b.ReportAllocs()
	b.SetBytes(64 * link.IdealBatch)
	start := time.Now()
	for b.Loop() {
		if n, err := tx.Send(frames); n != len(frames) || err != nil {
			b.Fatal(n, err)
		}
		if n, err := rx.Recv(in, sizes); n != len(frames) || err != nil {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*link.IdealBatch), "ns/frame")
}

// BenchmarkTxBufRecvZC64 is BenchmarkSendRecv64 building the frames in
// place and receiving them without a copy.
func BenchmarkTxBufRecvZC64(b *testing.B) {
	r := newTestRegion(b, Config{})
	tx, rx := r.DaemonEnd(), r.AppEnd()
	views := make([][]byte, link.IdealBatch)
	b.ReportAllocs()
	b.SetBytes(64 * link.IdealBatch)
	start := time.Now()
	for b.Loop() {
		for range link.IdealBatch {
			buf := tx.TxBuf()
			buf[0], buf[63] = 1, 2
			tx.TxSubmit(64)
		}
		if err := tx.Flush(); err != nil {
			b.Fatal(err)
		}
		if n := rx.RecvZC(views); n != link.IdealBatch {
			b.Fatal(n)
		}
		rx.ReleaseRx()
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*link.IdealBatch), "ns/frame")
}

// BenchmarkPingPong bounces one 64-byte frame between two spinning
// goroutines: ns/frame is half a round trip, one frame's latency.
func BenchmarkPingPong(b *testing.B) {
	frame := [][]byte{make([]byte, 64)}
	pingPong(b,
		func(a *End, _ int) { a.Send(frame) },
		func(d *End, view []byte) {
			d.Send([][]byte{view}) // copies out of the slot before releasing it
			d.ReleaseRx()
		})
}

// BenchmarkPingPongInPlace bounces a 138-byte frame (a 64 B RDMA write)
// and a 62-byte answer (its ACK) between two spinning goroutines, each
// frame built in its slot (TxBuf, TxSubmit, Flush): ns/frame is half a
// round trip. Unlike BenchmarkPingPong it shows what the consumer's
// polling costs a producer still writing the slot.
func BenchmarkPingPongInPlace(b *testing.B) { pingPong(b, sendWrite, echoACK) }

// sendWrite builds a 138-byte frame (a 64 B RDMA write) in its slot.
func sendWrite(a *End, i int) {
	build(a.TxBuf(), 138, byte(i))
	a.TxSubmit(138)
	a.Flush()
}

// echoACK answers a frame with a 62-byte one (an ACK) built in its slot.
func echoACK(d *End, view []byte) {
	seq := view[0]
	d.ReleaseRx()
	build(d.TxBuf(), 62, seq)
	d.TxSubmit(62)
	d.Flush()
}

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

// pingPong runs b.N round trips: send puts frame i on the application's
// end; a goroutine spinning on the daemon's end answers each frame it
// receives with echo (which releases it); the loop spins for the answer.
func pingPong(b *testing.B, send func(a *End, i int), echo func(d *End, view []byte)) {
	pingPongRing(b, 64, 1, send, echo)
}

// BenchmarkPingPongRing is BenchmarkPingPongInPlace on rings as the
// daemon makes them (1024 slots of 4 KiB) and read as the daemon and the
// transport read them, up to 64 frames a RecvZC: each side looks at the
// slot after the frame it finds, a line it last read a round of the ring
// ago.
func BenchmarkPingPongRing(b *testing.B) { pingPongRing(b, 1024, 64, sendWrite, echoACK) }

// pingPongRing runs a ping-pong on rings of slots slots, each side
// receiving up to batch frames at a time.
func pingPongRing(b *testing.B, slots, batch int, send func(a *End, i int), echo func(d *End, view []byte)) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs")
	}
	r := newTestRegion(b, Config{Slots: slots})
	a, d := r.AppEnd(), r.DaemonEnd()
	views := make([][]byte, batch)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		views := make([][]byte, batch)
		for spins := 0; ; spins++ {
			if d.RecvZC(views) >= 1 {
				echo(d, views[0])
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
	})
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		send(a, i)
		for a.RecvZC(views) == 0 {
		}
		a.ReleaseRx()
	}
	el := time.Since(start)
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(el.Nanoseconds())/float64(2*b.N), "ns/frame")
}

// BenchmarkPingPongWait is BenchmarkPingPongRing with both sides asleep
// between frames: each Waits (its doorbell, ppoll) as soon as its ring is
// empty, as an idle daemon worker or application does, so that every
// frame costs the producer's doorbell and the consumer's wake-up. It
// reports the round trip's median and 90th percentile beside the mean,
// next to BenchmarkPipePingPong, the same two threads with a bare pipe
// each way: what the rings' doorbell protocol adds to a wake-up, and
// what a wake-up costs on the host at all.
func BenchmarkPingPongWait(b *testing.B) {
	r := newTestRegion(b, Config{Slots: 1024})
	a, d := r.AppEnd(), r.DaemonEnd()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		views := make([][]byte, 64)
		for {
			if d.RecvZC(views) >= 1 {
				echoACK(d, views[0])
				continue
			}
			select {
			case <-stop:
				return
			default:
			}
			_ = d.Wait(10 * time.Millisecond)
		}
	})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	views := make([][]byte, 64)
	rtts := make([]time.Duration, 0, b.N)
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		sendWrite(a, i)
		for a.RecvZC(views) == 0 {
			_ = a.Wait(10 * time.Millisecond)
		}
		a.ReleaseRx()
		rtts = append(rtts, time.Since(t0))
	}
	close(stop)
	wg.Wait()
	reportRTTs(b, rtts)
}

// BenchmarkPipePingPong bounces a byte between two threads through two
// pipes, each side blocked in read(2) in between: a wake-up each way,
// nothing else.
func BenchmarkPipePingPong(b *testing.B) {
	var there, back [2]int
	for _, p := range []*[2]int{&there, &back} {
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var c [1]byte
		for {
			if n, _ := unix.Read(there[0], c[:]); n == 0 {
				return // closed: done
			}
			_, _ = unix.Write(back[1], c[:])
		}
	})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var c [1]byte
	rtts := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		_, _ = unix.Write(there[1], c[:])
		_, _ = unix.Read(back[0], c[:])
		rtts = append(rtts, time.Since(t0))
	}
	_ = unix.Close(there[1])
	wg.Wait()
	for _, fd := range []int{there[0], back[0], back[1]} {
		_ = unix.Close(fd)
	}
	reportRTTs(b, rtts)
}

// reportRTTs reports round trips' median and 90th percentile, in µs.
func reportRTTs(b *testing.B, rtts []time.Duration) {
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(rtts[len(rtts)*9/10].Nanoseconds())/1e3, "p90-µs")
}
