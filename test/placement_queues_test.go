package test

import (
	"bytes"
	"testing"

	"github.com/softfabric/softfabric/dataplane/rc"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/device"
)

// TestPlacedReadsQueues: with several queues, a read's responses are
// placed whatever queue they arrive on. The application announces a read
// on the ring of the worker that owns its queue pair, while the NIC
// delivers the responses on the queue its hashing picks (on veth, the one
// the peer sent them on): the daemon's worker that receives them must
// know the expectation. Four queue pairs, each owned by a worker of its
// own at either end, read 1 MiB each, then the peer writes 1 MiB on each;
// then the same over a wire that drops, corrupts and duplicates 2 % of
// the frames.
func TestPlacedReadsQueues(t *testing.T) {
	for _, impaired := range []bool{false, true} {
		t.Run(map[bool]string{false: "clean", true: "impaired"}[impaired], func(t *testing.T) { testPlacedReadsQueues(t, impaired) })
	}
}

func testPlacedReadsQueues(t *testing.T, impaired bool) {
	p, a, b, mem, shared := placementPair(t, 2, impaired)
	fill(b.buf.Bytes(), 5)
	const n = 1 << 20
	var qas, qbs []*rc.QP
	for i := range 4 {
		qa, qb := rcPairWith(t, a, b, verbs.NewRecvQueue(4), verbs.NewRecvQueue(4), i%2, (i/2)%2, device.ConnectOptions{Timeout: 17})
		qas, qbs = append(qas, qa), append(qbs, qb)
	}
	before := placedFrames(t, p.A)
	for round := range 3 {
		clear(mem)
		for i, qa := range qas {
			wr := verbs.SendWR{Op: verbs.OpRead, Flags: verbs.Signaled, SGL: sge(shared, i*(2<<20), n),
				RemoteAddr: b.buf.Addr() + uint64(i*4096), RKey: b.buf.RKey(), ID: uint64(i)}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range poll(t, a, b, a.scq, len(qas)) {
			if c.Status != verbs.Success {
				t.Fatalf("round %d: read %d: %v", round, c.WRID, c.Status)
			}
		}
		for i := range qas {
			if !bytes.Equal(mem[i*(2<<20):i*(2<<20)+n], b.buf.Bytes()[i*4096:i*4096+n]) {
				t.Fatalf("round %d: read %d is not what the peer holds", round, i)
			}
		}
	}
	mtu := uint64(qas[0].Attr().PathMTU)
	packets := 3 * uint64(len(qas)) * ((n + mtu - 1) / mtu)
	placed := placedFrames(t, p.A) - before
	var handed, late uint64
	for _, w := range daemonStats(t, p.A).Workers {
		handed += w.ExpectationsHanded
		late += w.ExpectationsLate
	}
	t.Logf("%d of %d read responses placed; %d expectations handed between workers, %d late", placed, packets, handed, late)
	// Writes from the peer into the shared memory, one per queue pair at
	// once: the rest of each, announced after its first packets, is
	// placed where it arrives too.
	before = placedFrames(t, p.A)
	clear(mem)
	for i, qb := range qbs {
		wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: sge(b.buf, i*4096, n),
			RemoteAddr: shared.Addr() + uint64(i*(2<<20)+100), RKey: shared.RKey(), ID: uint64(i)}
		if err := qb.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range poll(t, a, b, b.scq, len(qbs)) {
		if c.Status != verbs.Success {
			t.Fatalf("write %d: %v", c.WRID, c.Status)
		}
	}
	for i := range qbs {
		if !bytes.Equal(mem[i*(2<<20)+100:i*(2<<20)+100+n], b.buf.Bytes()[i*4096:i*4096+n]) {
			t.Fatalf("write %d is not in the shared memory", i)
		}
	}
	wplaced := placedFrames(t, p.A) - before
	t.Logf("%d of the writes' %d packets placed", wplaced, packets/3)
	if !impaired && wplaced < packets/3/2 {
		t.Fatalf("only %d of the writes' %d packets placed", wplaced, packets/3)
	}
	// Placed responses that arrive on another queue than their queue
	// pair's reach the application's worker of that queue, which hands
	// them to the owner with their payload copied back: their ICRC must
	// hold (the daemon keeps it in the slot).
	if st := a.d.Stats(); !impaired && st.BadICRC != 0 {
		t.Fatalf("%d frames with a bad ICRC on a clean wire (handed over %d)", st.BadICRC, st.HandedOff)
	}
	if handed == 0 {
		t.Fatal("no expectation was handed to another worker: the test did not spread its queue pairs over the queues")
	}
	// On a clean wire all are placed but where the application's ring
	// filled on a busy host (TestPlacedReads says more); before handing
	// over, half. Under impairment a loss ends its read's placement until
	// the transport asks again, and how many responses the peer sends in
	// between depends on scheduling: 70-88 % placed on an idle host, 48 %
	// in a CI run beside other packages. With repeated reads not placed
	// again, only what comes before each read's first loss would be: a
	// few per cent, under the quarter required.
	if !impaired && placed < packets*3/4 || impaired && placed < packets/4 {
		t.Fatalf("only %d of %d responses placed", placed, packets)
	}
}
