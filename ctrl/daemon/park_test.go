package daemon

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link/shmlink"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/dataplane/xsk"
)

// chunkStore stands in for the AF_XDP socket's UMEM in parking: Keep
// copies a frame of the last batch aside, Borrow the frame it is given.
type chunkStore struct {
	spare int
	batch [][]byte
	mem   map[uint64][]byte
	next  uint64
}

func (k *chunkStore) Spare() int { return k.spare }

func (k *chunkStore) Keep(i int, dst []xsk.Chunk) []xsk.Chunk {
	k.next++
	k.mem[k.next] = append([]byte(nil), k.batch[i]...)
	return append(dst, xsk.Chunk{Addr: k.next, Len: uint32(len(k.batch[i]))})
}

func (k *chunkStore) Borrow(f []byte, dst []xsk.Chunk) ([]xsk.Chunk, bool) {
	k.next++
	k.mem[k.next] = append([]byte(nil), f...)
	return append(dst, xsk.Chunk{Addr: k.next, Len: uint32(len(f))}), true
}

func (k *chunkStore) View(c xsk.Chunk) []byte { return k.mem[c.Addr] }

func (k *chunkStore) Return(cs []xsk.Chunk) {
	for _, c := range cs {
		if _, ok := k.mem[c.Addr]; !ok {
			panic("a chunk returned twice")
		}
		delete(k.mem, c.Addr)
	}
}

// parkFixture: applications a (QP 0x42) and other (QP 0x43), each with a
// 64-slot ring, on a worker that can park spare frames.
func parkFixture(t *testing.T, spare int) (f *placeFixture, k *chunkStore, apps []*app, aRing, otherRing *shmlink.End) {
	f = newPlaceFixture(t)
	k = &chunkStore{spare: spare, mem: map[uint64][]byte{}}
	f.w.keep = k
	r, err := shmlink.Create("park-test", shmlink.Config{Slots: 64, SlotSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f.a.ends, f.other.ends = []*shmlink.End{f.ring.DaemonEnd()}, []*shmlink.End{r.DaemonEnd()}
	f.a.st, f.other.st = make([]appCounters, 1), make([]appCounters, 1)
	return f, k, []*app{f.a, f.other}, f.ring.AppEnd(), r.AppEnd()
}

// nicBatch has the worker receive frames as one batch from the NIC.
func nicBatch(w *worker, k *chunkStore, apps []*app, frames ...[]byte) {
	k.batch = frames
	for i, f := range frames {
		w.admit(i, f)
	}
	w.publish(apps)
}

// drain reads what an application's ring holds and returns the PSNs.
func drain(t *testing.T, e *shmlink.End) []uint32 {
	t.Helper()
	views := make([][]byte, 64)
	n := e.RecvZC(views)
	var psns []uint32
	for _, v := range views[:n] {
		var p wire.Packet
		if err := p.Parse(v); err != nil {
			t.Fatal(err)
		}
		psns = append(psns, p.BTH().PSN())
	}
	e.ReleaseRx()
	return psns
}

// TestParkFullRing: frames from the NIC for an application whose ring is
// full are parked, not left in the NIC's ring ahead of the others'
// frames: the other application on the queue gets its frames at once.
// Once the slow one makes room, its parked frames come first and in
// order, new ones queue behind them; beyond three quarters of the spare
// chunks its frames are dropped and counted, and the others park in the
// quarter left; an application that goes has its parked frames' chunks
// given back.
func TestParkFullRing(t *testing.T) {
	f, k, apps, a, other := parkFixture(t, 20)
	w := f.w
	send := func(qpn, psn uint32) []byte {
		return rcFrame(&f.peer, wire.RCSendOnly, qpn, psn, pattern(100, byte(psn)))
	}
	var batch [][]byte
	for psn := range uint32(64) {
		batch = append(batch, send(0x42, psn))
	}
	nicBatch(w, k, apps, batch...)
	// a's ring is full. The next frames for it park; other's pass.
	nicBatch(w, k, apps, send(0x42, 64), send(0x43, 1000), send(0x42, 65), send(0x43, 1001))
	if got := drain(t, other); len(got) != 2 || got[0] != 1000 || got[1] != 1001 {
		t.Fatalf("the other application got %v behind the full ring", got)
	}
	if st := w.stats(); st.Parked != 2 || st.ParkedNow != 2 || st.RingFulls != 0 || len(k.mem) != 2 {
		t.Fatalf("parked %d, dropped %d, %d chunks kept", st.Parked, st.RingFulls, len(k.mem))
	}
	// a is still full: nothing moves.
	if w.unpark(apps) {
		t.Fatal("unparked into a full ring")
	}
	// a reads its ring; before the worker's next pass one more frame
	// arrives, with room in a's ring: it goes behind the parked ones.
	if got := drain(t, a); len(got) != 64 {
		t.Fatalf("a read %d frames", len(got))
	}
	nicBatch(w, k, apps, send(0x42, 66))
	if !w.unpark(apps) || len(w.parking) != 0 || len(k.mem) != 0 || w.kept != 0 {
		t.Fatalf("parked frames not delivered (parking %d, %d chunks kept, %d counted)", len(w.parking), len(k.mem), w.kept)
	}
	if got := drain(t, a); len(got) != 3 || got[0] != 64 || got[1] != 65 || got[2] != 66 {
		t.Fatalf("a got %v after its parked frames, want [64 65 66]", got)
	}
	// Past three quarters of the spare chunks, a's frames are dropped;
	// other's still pass.
	batch = batch[:0]
	for psn := range uint32(64 + 25) {
		batch = append(batch, send(0x42, 100+psn))
	}
	nicBatch(w, k, apps, append(batch, send(0x43, 1002))...)
	if st := w.stats(); st.Parked != 3+15 || st.RingFulls != 10 || f.a.st[0].dropped.Load() != 10 {
		t.Fatalf("parked %d, dropped %d (a: %d), want 18 and 10", st.Parked, st.RingFulls, f.a.st[0].dropped.Load())
	}
	if got := drain(t, other); len(got) != 1 {
		t.Fatalf("the other application got %v", got)
	}
	// other's ring fills too: its frames park in the quarter left.
	batch = batch[:0]
	for psn := range uint32(64 + 7) {
		batch = append(batch, send(0x43, 2000+psn))
	}
	nicBatch(w, k, apps, batch...)
	if st := w.stats(); st.Parked != 3+15+5 || st.RingFulls != 12 || f.other.st[0].dropped.Load() != 2 {
		t.Fatalf("parked %d, dropped %d (other: %d), want 23 and 12", st.Parked, st.RingFulls, f.other.st[0].dropped.Load())
	}
	// Both read their rings: the parked frames follow, in order, and
	// their chunks go back.
	if ra, ro := drain(t, a), drain(t, other); len(ra) != 64 || len(ro) != 64 {
		t.Fatalf("a read %d, other %d", len(ra), len(ro))
	}
	w.unpark(apps)
	if len(k.mem) != 0 || w.kept != 0 {
		t.Fatalf("%d chunks still kept (%d counted)", len(k.mem), w.kept)
	}
	if ra, ro := drain(t, a), drain(t, other); len(ra) != 15 || ra[0] != 164 || ra[14] != 178 || len(ro) != 5 || ro[0] != 2064 || ro[4] != 2068 {
		t.Fatalf("a got %v, other %v from their parked frames", ra, ro)
	}
	// a fills its ring again, parks, and goes: its chunks come back.
	batch = batch[:0]
	for psn := range uint32(70) {
		batch = append(batch, send(0x42, 200+psn))
	}
	nicBatch(w, k, apps, batch...)
	if len(k.mem) != 6 {
		t.Fatalf("%d chunks kept, want 6", len(k.mem))
	}
	unknown := w.c.unknown.Load()
	w.unpark(apps[1:])
	if len(k.mem) != 0 || w.kept != 0 || len(w.parking) != 0 || w.c.unknown.Load() != unknown+6 || w.stats().ParkedNow != 0 {
		t.Fatalf("%d chunks kept (%d counted) after the application went", len(k.mem), w.kept)
	}
}

// TestParkCopies: a frame a forwarder hands the worker, or one an
// application sends to another on the device, for a full ring is parked
// as a copy, and delivered in order with the frames from the NIC parked
// around it.
func TestParkCopies(t *testing.T) {
	f, k, apps, a, _ := parkFixture(t, 20)
	w := f.w
	send := func(psn uint32) []byte { return rcFrame(&f.peer, wire.RCSendOnly, 0x42, psn, pattern(100, byte(psn))) }
	var batch [][]byte
	for psn := range uint32(65) {
		batch = append(batch, send(psn))
	}
	nicBatch(w, k, apps, batch...)
	w.admit(-1, send(65)) // from a forwarder
	nicBatch(w, k, apps, send(66))
	looped := send(67) // from an application on the device
	var p wire.Packet
	if err := p.Parse(looped); err != nil {
		t.Fatal(err)
	}
	w.loopBack(&p, looped)
	if st := w.stats(); st.Parked != 4 || st.RingFulls != 0 || len(k.mem) != 4 {
		t.Fatalf("parked %d, dropped %d, %d chunks kept", st.Parked, st.RingFulls, len(k.mem))
	}
	if got := drain(t, a); len(got) != 64 {
		t.Fatalf("a read %d", len(got))
	}
	w.unpark(apps)
	if got := drain(t, a); len(got) != 4 || got[0] != 64 || got[1] != 65 || got[2] != 66 || got[3] != 67 || len(k.mem) != 0 {
		t.Fatalf("a got %v after its parked frames, %d chunks kept", got, len(k.mem))
	}
}
