package match

import (
	"errors"
	"math/rand"
	"reflect"
	"testing"
)

func mustPost(t *testing.T, q *Queue, rs ...Recv) {
	t.Helper()
	for _, r := range rs {
		if err := q.Post(r); err != nil {
			t.Fatalf("Post(%+v): %v", r, err)
		}
	}
}

func mustUnexp(t *testing.T, q *Queue, ms ...Msg) {
	t.Helper()
	for _, m := range ms {
		if err := q.Unexpected(m); err != nil {
			t.Fatalf("Unexpected(%+v): %v", m, err)
		}
	}
}

func TestArrive(t *testing.T) {
	tests := []struct {
		name     string
		tagged   bool
		posted   []Recv
		src, tag uint64
		want     uint64 // Context of the receive taken; 0 = none
	}{
		{"empty", true, nil, 1, 1, 0},
		{"exact", true, []Recv{{Context: 1, Src: 3, Tag: 7}}, 3, 7, 1},
		{"wrong tag", true, []Recv{{Context: 1, Src: 3, Tag: 7}}, 3, 8, 0},
		{"wrong src", true, []Recv{{Context: 1, Src: 3, Tag: 7}}, 4, 7, 0},
		{"addr any", true, []Recv{{Context: 1, Src: AddrAny, Tag: 7}}, 99, 7, 1},
		{"ignore low bits", true, []Recv{{Context: 1, Src: AddrAny, Tag: 0x100, Ignore: 0xff}}, 0, 0x1ab, 1},
		{"ignore misses high bit", true, []Recv{{Context: 1, Src: AddrAny, Tag: 0x100, Ignore: 0xff}}, 0, 0x2ab, 0},
		{"ignore all", true, []Recv{{Context: 1, Src: AddrAny, Tag: 5, Ignore: ^uint64(0)}}, 0, 12345, 1},
		{"older wins", true, []Recv{
			{Context: 1, Src: AddrAny, Tag: 7},
			{Context: 2, Src: 3, Tag: 7},
		}, 3, 7, 1},
		{"skips non-matching older", true, []Recv{
			{Context: 1, Src: 4, Tag: 7},
			{Context: 2, Src: 3, Tag: 0, Ignore: 0xf},
			{Context: 3, Src: 3, Tag: 7},
		}, 3, 7, 2},
		{"untagged ignores tag", false, []Recv{{Context: 1, Src: 3, Tag: 7}}, 3, 8, 1},
		{"untagged checks src", false, []Recv{{Context: 1, Src: 3}}, 4, 0, 0},
		{"untagged older wins", false, []Recv{{Context: 1, Src: AddrAny}, {Context: 2, Src: 3}}, 3, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New(8, 8, tc.tagged)
			mustPost(t, q, tc.posted...)
			r, ok := q.Arrive(tc.src, tc.tag)
			if ok != (tc.want != 0) || (ok && r.Context != tc.want) {
				t.Fatalf("Arrive = %+v, %v; want context %d", r, ok, tc.want)
			}
			wantPosted := len(tc.posted)
			if ok {
				wantPosted--
			}
			if q.Posted() != wantPosted {
				t.Fatalf("Posted = %d, want %d", q.Posted(), wantPosted)
			}
		})
	}
}

func TestArriveReturnsCopy(t *testing.T) {
	q := New(1, 1, true)
	want := Recv{Context: 9, Src: 2, Tag: 3, Ignore: 4, Cookie: 5}
	mustPost(t, q, want)
	if r, ok := q.Arrive(2, 3); !ok || r != want {
		t.Fatalf("Arrive = %+v, %v; want %+v", r, ok, want)
	}
}

func TestTakeUnexpected(t *testing.T) {
	tests := []struct {
		name             string
		tagged           bool
		msgs             []Msg
		src, tag, ignore uint64
		want             uint64 // Cookie of the message taken; 0 = none
	}{
		{"empty", true, nil, AddrAny, 0, 0, 0},
		{"exact", true, []Msg{{Src: 1, Tag: 2, Cookie: 10}}, 1, 2, 0, 10},
		{"wrong tag", true, []Msg{{Src: 1, Tag: 2, Cookie: 10}}, 1, 3, 0, 0},
		{"wrong src", true, []Msg{{Src: 1, Tag: 2, Cookie: 10}}, 2, 2, 0, 0},
		{"addr any", true, []Msg{{Src: 1, Tag: 2, Cookie: 10}}, AddrAny, 2, 0, 10},
		{"ignore", true, []Msg{{Src: 1, Tag: 0x1234, Cookie: 10}}, 1, 0x1200, 0xff, 10},
		{"ignore misses", true, []Msg{{Src: 1, Tag: 0x1334, Cookie: 10}}, 1, 0x1200, 0xff, 0},
		{"older wins", true, []Msg{
			{Src: 1, Tag: 2, Cookie: 10},
			{Src: 1, Tag: 2, Cookie: 11},
		}, 1, 2, 0, 10},
		{"skips non-matching older", true, []Msg{
			{Src: 2, Tag: 2, Cookie: 10},
			{Src: 1, Tag: 3, Cookie: 11},
			{Src: 1, Tag: 2, Cookie: 12},
			{Src: 1, Tag: 2, Cookie: 13},
		}, 1, 2, 0, 12},
		{"untagged ignores tag", false, []Msg{{Src: 1, Tag: 2, Cookie: 10}}, 1, 99, 0, 10},
		{"untagged checks src", false, []Msg{{Src: 1, Cookie: 10}}, 2, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New(8, 8, tc.tagged)
			mustUnexp(t, q, tc.msgs...)
			if m, ok := q.Peek(tc.src, tc.tag, tc.ignore); ok != (tc.want != 0) || (ok && m.Cookie != tc.want) {
				t.Fatalf("Peek = %+v, %v; want cookie %d", m, ok, tc.want)
			}
			if q.Pending() != len(tc.msgs) {
				t.Fatalf("Peek removed a message: Pending = %d", q.Pending())
			}
			m, ok := q.TakeUnexpected(tc.src, tc.tag, tc.ignore)
			if ok != (tc.want != 0) || (ok && m.Cookie != tc.want) {
				t.Fatalf("TakeUnexpected = %+v, %v; want cookie %d", m, ok, tc.want)
			}
			want := len(tc.msgs)
			if ok {
				want--
			}
			if q.Pending() != want {
				t.Fatalf("Pending = %d, want %d", q.Pending(), want)
			}
		})
	}
}

func TestUnexpectedFieldsKept(t *testing.T) {
	q := New(1, 1, true)
	want := Msg{Src: 1, Tag: 2, Len: 3, Data: 4, Flags: 5, Cookie: 6}
	mustUnexp(t, q, want)
	if m, ok := q.TakeUnexpected(1, 2, 0); !ok || m != want {
		t.Fatalf("TakeUnexpected = %+v, %v; want %+v", m, ok, want)
	}
}

func TestClaim(t *testing.T) {
	newQ := func(t *testing.T) *Queue {
		q := New(4, 4, true)
		mustUnexp(t, q, Msg{Src: 1, Tag: 5, Cookie: 10}, Msg{Src: 1, Tag: 5, Cookie: 11})
		if m, ok := q.Claim(1, 5, 0, 100); !ok || m.Cookie != 10 {
			t.Fatalf("Claim = %+v, %v; want cookie 10", m, ok)
		}
		return q
	}
	tests := []struct {
		name string
		op   func(q *Queue) (Msg, bool)
		want uint64 // Cookie; 0 = none
		left int    // Pending after
	}{
		{"take claimed", func(q *Queue) (Msg, bool) { return q.TakeClaimed(100) }, 10, 1},
		{"take claimed wrong ctx", func(q *Queue) (Msg, bool) { return q.TakeClaimed(101) }, 0, 2},
		{"discard", func(q *Queue) (Msg, bool) { return q.Discard(100) }, 10, 1},
		{"discard wrong ctx", func(q *Queue) (Msg, bool) { return q.Discard(101) }, 0, 2},
		{"peek skips claimed", func(q *Queue) (Msg, bool) { return q.Peek(1, 5, 0) }, 11, 2},
		{"take skips claimed", func(q *Queue) (Msg, bool) { return q.TakeUnexpected(1, 5, 0) }, 11, 1},
		{"discard match skips claimed", func(q *Queue) (Msg, bool) { return q.DiscardMatch(AddrAny, 0, ^uint64(0)) }, 11, 1},
		{"second claim skips claimed", func(q *Queue) (Msg, bool) { return q.Claim(1, 5, 0, 200) }, 11, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQ(t)
			m, ok := tc.op(q)
			if ok != (tc.want != 0) || (ok && m.Cookie != tc.want) {
				t.Fatalf("got %+v, %v; want cookie %d", m, ok, tc.want)
			}
			if q.Pending() != tc.left {
				t.Fatalf("Pending = %d, want %d", q.Pending(), tc.left)
			}
		})
	}
}

func TestClaimedInvisible(t *testing.T) {
	q := New(4, 4, true)
	mustUnexp(t, q, Msg{Src: 1, Tag: 5, Cookie: 10})
	if _, ok := q.Claim(1, 5, 0, 100); !ok {
		t.Fatal("Claim failed")
	}
	if m, ok := q.Peek(AddrAny, 0, ^uint64(0)); ok {
		t.Fatalf("Peek saw claimed %+v", m)
	}
	if m, ok := q.TakeUnexpected(AddrAny, 0, ^uint64(0)); ok {
		t.Fatalf("TakeUnexpected took claimed %+v", m)
	}
	if m, ok := q.Claim(AddrAny, 0, ^uint64(0), 7); ok {
		t.Fatalf("Claim reclaimed %+v", m)
	}
	// A new receive arriving path: a posted receive is not satisfied by a
	// claimed message either (Arrive consults only posted receives).
	if r, ok := q.Arrive(1, 5); ok {
		t.Fatalf("Arrive matched %+v", r)
	}
	if m, ok := q.TakeClaimed(100); !ok || m.Cookie != 10 {
		t.Fatalf("TakeClaimed = %+v, %v", m, ok)
	}
	if m, ok := q.TakeClaimed(100); ok {
		t.Fatalf("TakeClaimed twice: %+v", m)
	}
	if q.Pending() != 0 {
		t.Fatalf("Pending = %d", q.Pending())
	}
}

func TestClaimSameCtxOrder(t *testing.T) {
	q := New(4, 4, false)
	mustUnexp(t, q, Msg{Src: 1, Cookie: 10}, Msg{Src: 1, Cookie: 11})
	q.Claim(AddrAny, 0, 0, 7)
	q.Claim(AddrAny, 0, 0, 7)
	for _, want := range []uint64{10, 11} {
		if m, ok := q.TakeClaimed(7); !ok || m.Cookie != want {
			t.Fatalf("TakeClaimed = %+v, %v; want cookie %d", m, ok, want)
		}
	}
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name   string
		ctx    uint64
		ok     bool
		remain []uint64 // contexts left, in order (drained with AddrAny Arrive)
	}{
		{"head", 1, true, []uint64{2, 3, 2}},
		{"middle", 2, true, []uint64{1, 3, 2}}, // oldest of the duplicates
		{"tail", 3, true, []uint64{1, 2, 2}},
		{"missing", 9, false, []uint64{1, 2, 3, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := New(4, 0, false)
			mustPost(t, q,
				Recv{Context: 1, Src: AddrAny},
				Recv{Context: 2, Src: AddrAny, Cookie: 20},
				Recv{Context: 3, Src: AddrAny},
				Recv{Context: 2, Src: AddrAny, Cookie: 21},
			)
			r, ok := q.Cancel(tc.ctx)
			if ok != tc.ok || (ok && r.Context != tc.ctx) {
				t.Fatalf("Cancel = %+v, %v", r, ok)
			}
			if ok && tc.ctx == 2 && r.Cookie != 20 {
				t.Fatalf("Cancel took the newer duplicate: %+v", r)
			}
			var got []uint64
			for {
				r, ok := q.Arrive(0, 0)
				if !ok {
					break
				}
				got = append(got, r.Context)
			}
			if !reflect.DeepEqual(got, tc.remain) {
				t.Fatalf("remaining %v, want %v", got, tc.remain)
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	q := New(2, 1, true)
	mustPost(t, q, Recv{Context: 1}, Recv{Context: 2})
	if err := q.Post(Recv{Context: 3}); !errors.Is(err, ErrFull) {
		t.Fatalf("Post over capacity: %v", err)
	}
	mustUnexp(t, q, Msg{Cookie: 1})
	if err := q.Unexpected(Msg{Cookie: 2}); !errors.Is(err, ErrFull) {
		t.Fatalf("Unexpected over capacity: %v", err)
	}
	// Freed slots are reused.
	q.Cancel(1)
	mustPost(t, q, Recv{Context: 3})
	q.TakeUnexpected(AddrAny, 0, ^uint64(0))
	mustUnexp(t, q, Msg{Cookie: 2})

	z := New(0, -1, false)
	if err := z.Post(Recv{}); !errors.Is(err, ErrFull) {
		t.Fatalf("Post on zero queue: %v", err)
	}
	if err := z.Unexpected(Msg{}); !errors.Is(err, ErrFull) {
		t.Fatalf("Unexpected on zero queue: %v", err)
	}
}

func TestFlush(t *testing.T) {
	q := New(4, 4, true)
	mustPost(t, q, Recv{Context: 1}, Recv{Context: 2}, Recv{Context: 3})
	mustUnexp(t, q, Msg{Cookie: 10}, Msg{Cookie: 11}, Msg{Cookie: 12})
	q.Cancel(2)
	q.Claim(AddrAny, 0, ^uint64(0), 5) // claimed messages are flushed too
	var rs, ms []uint64
	q.Flush(func(r Recv) { rs = append(rs, r.Context) }, func(m Msg) { ms = append(ms, m.Cookie) })
	if !reflect.DeepEqual(rs, []uint64{1, 3}) || !reflect.DeepEqual(ms, []uint64{10, 11, 12}) {
		t.Fatalf("Flush order: recvs %v msgs %v", rs, ms)
	}
	if q.Posted() != 0 || q.Pending() != 0 {
		t.Fatalf("after Flush: Posted %d Pending %d", q.Posted(), q.Pending())
	}
	// nil callbacks, and the queue is usable afterwards at full capacity.
	for i := range 4 {
		mustPost(t, q, Recv{Context: uint64(i)})
		mustUnexp(t, q, Msg{Cookie: uint64(i)})
	}
	q.Flush(nil, nil)
	if q.Posted() != 0 || q.Pending() != 0 {
		t.Fatalf("after Flush(nil, nil): Posted %d Pending %d", q.Posted(), q.Pending())
	}
}

// model is a slice-based reference implementation.
type model struct {
	tagged bool
	nr, nu int
	recvs  []Recv
	msgs   []unexp
}

func (m *model) match(src, tag, fsrc, ftag, fign uint64) bool {
	return (fsrc == AddrAny || fsrc == src) && (!m.tagged || (tag^ftag)&^fign == 0)
}

func (m *model) post(r Recv) error {
	if len(m.recvs) == m.nr {
		return ErrFull
	}
	m.recvs = append(m.recvs, r)
	return nil
}

func (m *model) unexpected(u Msg) error {
	if len(m.msgs) == m.nu {
		return ErrFull
	}
	m.msgs = append(m.msgs, unexp{Msg: u})
	return nil
}

func (m *model) arrive(src, tag uint64) (Recv, bool) {
	for i, r := range m.recvs {
		if m.match(src, tag, r.Src, r.Tag, r.Ignore) {
			m.recvs = append(m.recvs[:i], m.recvs[i+1:]...)
			return r, true
		}
	}
	return Recv{}, false
}

func (m *model) cancel(ctx uint64) (Recv, bool) {
	for i, r := range m.recvs {
		if r.Context == ctx {
			m.recvs = append(m.recvs[:i], m.recvs[i+1:]...)
			return r, true
		}
	}
	return Recv{}, false
}

func (m *model) find(src, tag, ign uint64) int {
	for i, u := range m.msgs {
		if !u.claimed && m.match(u.Src, u.Tag, src, tag, ign) {
			return i
		}
	}
	return -1
}

func (m *model) take(i int) (Msg, bool) {
	if i < 0 {
		return Msg{}, false
	}
	u := m.msgs[i]
	m.msgs = append(m.msgs[:i], m.msgs[i+1:]...)
	return u.Msg, true
}

func (m *model) takeClaimed(ctx uint64) (Msg, bool) {
	for i, u := range m.msgs {
		if u.claimed && u.ctx == ctx {
			return m.take(i)
		}
	}
	return Msg{}, false
}

func TestModel(t *testing.T) {
	for _, tagged := range []bool{false, true} {
		rng := rand.New(rand.NewSource(1))
		const nr, nu = 8, 8
		q := New(nr, nu, tagged)
		m := &model{tagged: tagged, nr: nr, nu: nu}
		// Small value ranges make matches, duplicates and misses all common.
		src := func() uint64 { return uint64(rng.Intn(3)) }
		fsrc := func() uint64 {
			if rng.Intn(4) == 0 {
				return AddrAny
			}
			return src()
		}
		tag := func() uint64 { return uint64(rng.Intn(8)) }
		ign := func() uint64 { return []uint64{0, 0, 1, 3, ^uint64(0)}[rng.Intn(5)] }
		ctx := func() uint64 { return uint64(rng.Intn(6)) }
		var seq uint64
		for step := range 20000 {
			seq++
			var got, want any
			switch op := rng.Intn(12); op {
			case 0, 1:
				r := Recv{Context: ctx(), Src: fsrc(), Tag: tag(), Ignore: ign(), Cookie: seq}
				got, want = q.Post(r), m.post(r)
			case 2, 3:
				s, tg := src(), tag()
				r1, ok1 := q.Arrive(s, tg)
				r2, ok2 := m.arrive(s, tg)
				got, want = [2]any{r1, ok1}, [2]any{r2, ok2}
			case 4, 5:
				u := Msg{Src: src(), Tag: tag(), Len: rng.Intn(100), Cookie: seq}
				got, want = q.Unexpected(u), m.unexpected(u)
			case 6:
				s, tg, ig := fsrc(), tag(), ign()
				m1, ok1 := q.TakeUnexpected(s, tg, ig)
				m2, ok2 := m.take(m.find(s, tg, ig))
				got, want = [2]any{m1, ok1}, [2]any{m2, ok2}
			case 7:
				s, tg, ig := fsrc(), tag(), ign()
				m1, ok1 := q.Peek(s, tg, ig)
				var m2 Msg
				i := m.find(s, tg, ig)
				if i >= 0 {
					m2 = m.msgs[i].Msg
				}
				got, want = [2]any{m1, ok1}, [2]any{m2, i >= 0}
			case 8:
				s, tg, ig, c := fsrc(), tag(), ign(), ctx()
				m1, ok1 := q.Claim(s, tg, ig, c)
				var m2 Msg
				i := m.find(s, tg, ig)
				if i >= 0 {
					m.msgs[i].claimed, m.msgs[i].ctx = true, c
					m2 = m.msgs[i].Msg
				}
				got, want = [2]any{m1, ok1}, [2]any{m2, i >= 0}
			case 9:
				c := ctx()
				var m1 Msg
				var ok1 bool
				if rng.Intn(2) == 0 {
					m1, ok1 = q.TakeClaimed(c)
				} else {
					m1, ok1 = q.Discard(c)
				}
				m2, ok2 := m.takeClaimed(c)
				got, want = [2]any{m1, ok1}, [2]any{m2, ok2}
			case 10:
				s, tg, ig := fsrc(), tag(), ign()
				m1, ok1 := q.DiscardMatch(s, tg, ig)
				m2, ok2 := m.take(m.find(s, tg, ig))
				got, want = [2]any{m1, ok1}, [2]any{m2, ok2}
			case 11:
				if rng.Intn(50) == 0 {
					var rs []Recv
					var ms []Msg
					q.Flush(func(r Recv) { rs = append(rs, r) }, func(u Msg) { ms = append(ms, u) })
					wrs := append([]Recv(nil), m.recvs...)
					var wms []Msg
					for _, u := range m.msgs {
						wms = append(wms, u.Msg)
					}
					got, want = [2]any{rs, ms}, [2]any{wrs, wms}
					m.recvs, m.msgs = nil, nil
					break
				}
				c := ctx()
				r1, ok1 := q.Cancel(c)
				r2, ok2 := m.cancel(c)
				got, want = [2]any{r1, ok1}, [2]any{r2, ok2}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("tagged=%v step %d: got %+v, want %+v", tagged, step, got, want)
			}
			if q.Posted() != len(m.recvs) || q.Pending() != len(m.msgs) {
				t.Fatalf("tagged=%v step %d: counts %d/%d, want %d/%d",
					tagged, step, q.Posted(), q.Pending(), len(m.recvs), len(m.msgs))
			}
		}
	}
}

func TestAllocs(t *testing.T) {
	q := New(16, 16, true)
	for i := range 8 { // leave some entries so scans do work
		mustPost(t, q, Recv{Context: uint64(100 + i), Src: 9, Tag: 9})
		mustUnexp(t, q, Msg{Src: 9, Tag: 9})
	}
	n := testing.AllocsPerRun(1000, func() {
		_ = q.Post(Recv{Context: 1, Src: AddrAny, Tag: 5})
		_ = q.Post(Recv{Context: 2, Src: 1, Tag: 5})
		_, _ = q.Arrive(1, 5)
		_, _ = q.Cancel(2)
		_ = q.Unexpected(Msg{Src: 1, Tag: 6, Cookie: 3})
		_, _ = q.Peek(1, 6, 0)
		_, _ = q.TakeUnexpected(AddrAny, 6, 0)
		_ = q.Unexpected(Msg{Src: 1, Tag: 6, Cookie: 3})
		_, _ = q.Claim(1, 6, 0, 42)
		_, _ = q.TakeClaimed(42)
	})
	if n != 0 {
		t.Fatalf("allocs per run = %v, want 0", n)
	}
	if q.Posted() != 8 || q.Pending() != 8 {
		t.Fatalf("steady state broken: Posted %d Pending %d", q.Posted(), q.Pending())
	}
}

func BenchmarkPostArrive(b *testing.B) {
	for _, depth := range []int{0, 16} {
		b.Run(map[int]string{0: "empty", 16: "depth16"}[depth], func(b *testing.B) {
			q := New(depth+1, 1, true)
			for i := range depth { // older non-matching receives to scan past
				_ = q.Post(Recv{Context: uint64(i), Src: 7, Tag: 1})
			}
			r := Recv{Context: 1, Src: AddrAny, Tag: 0x500, Ignore: 0xff}
			b.ReportAllocs()
			for b.Loop() {
				_ = q.Post(r)
				if _, ok := q.Arrive(3, 0x542); !ok {
					b.Fatal("no match")
				}
			}
		})
	}
}
