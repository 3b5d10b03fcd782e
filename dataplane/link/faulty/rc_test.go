package faulty_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softfabric/softfabric/dataplane/link/faulty"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/transporttest"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// TestRCWritesOverReorder moves RC writes from a node whose link reorders
// a fifth of its frames (and delays them) to a node on a clean link: every
// write completes successfully and the data arrive intact.
func TestRCWritesOverReorder(t *testing.T) {
	for _, f := range []faulty.Faults{
		{Reorder: 0.2},
		{Reorder: 0.2, ReorderDelay: 20 * time.Microsecond, Delay: 2 * time.Microsecond},
	} {
		t.Run(f.String(), func(t *testing.T) { rcWrites(t, f) })
	}
}

func rcWrites(t *testing.T, f faulty.Faults) {
	p := transporttest.NewPair(memlink.Config{})
	w, err := faulty.Wrap(p.A.Link, faulty.Config{Faults: f, Seed: 11, Now: func() time.Duration { return time.Duration(p.Now) }})
	if err != nil {
		t.Fatal(err)
	}
	p.A.Filter.Link = w // between A's node and its end of the memlink
	qa, _, err := p.ConnectRC(transporttest.RCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const writes, slot = 400, 5000
	const access = mr.LocalWrite | mr.RemoteWrite
	src, err := p.A.Buffer(writes*slot, access)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := p.B.Buffer(writes*slot, access)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(rng.Uint32())
	}
	sizes := make([]int, writes)
	for i := range sizes {
		sizes[i] = 1 + rng.IntN(slot) // 1 to 5 packets at the 1024-byte MTU
	}

	// step runs both nodes once; time moves while nothing happens, by
	// 1 µs while frames are on the link or held by the wrapper.
	step := func() {
		a, err := p.A.Node.Poll(p.Now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.B.Node.Poll(p.Now)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case a || b:
		case p.A.Link.Pending() > 0 || p.B.Link.Pending() > 0 || w.Stats().Held > 0:
			p.Now += 1000
		default:
			next := p.A.Node.NextDeadline()
			if next == 0 {
				t.Fatal("idle with writes outstanding")
			}
			p.Now = max(next, p.Now+1000)
		}
	}
	posted, done := 0, 0
	comps := make([]verbs.Completion, 64)
	for steps := 0; done < writes; steps++ {
		if steps > 1_000_000 {
			t.Fatalf("%d of %d writes done after %d steps", done, writes, steps)
		}
		for posted < writes && posted-done < 32 {
			off := posted * slot
			wr := verbs.SendWR{
				ID: uint64(posted), Op: verbs.OpWrite, Flags: verbs.Signaled,
				SGL:        []mr.SGE{transporttest.SGE(src, off, sizes[posted])},
				RemoteAddr: dst.Addr() + uint64(off), RKey: dst.RKey(),
			}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		step()
		n := p.A.SendCQ.Poll(comps)
		for _, c := range comps[:n] {
			if c.Status != verbs.Success || c.WRID != uint64(done) {
				t.Fatalf("completion %+v, want success of write %d", c, done)
			}
			done++
		}
	}
	for i, n := range sizes {
		off := i * slot
		if !bytes.Equal(dst.Bytes()[off:off+n], src.Bytes()[off:off+n]) {
			t.Fatalf("write %d (%d bytes): data differ", i, n)
		}
	}
	s := w.Stats()
	if s.Reordered == 0 || s.Sent+s.Duplicated != s.Delivered+s.Lost+s.Held {
		t.Fatalf("stats %+v", s)
	}
	t.Logf("%d writes, t=%v, wrapper %+v, A %+v", writes, time.Duration(p.Now), s, p.A.Node.Stats())
}
