package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestTimerHeapOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h timerHeap
	var want []int64
	for round := 0; round < 50; round++ {
		for i := 0; i < r.IntN(40); i++ {
			d := r.Int64N(1000)
			h.push(timer{deadline: d})
			want = append(want, d)
		}
		slices.Sort(want)
		for i := 0; i < r.IntN(len(want)+1); i++ {
			if got := h.pop().deadline; got != want[0] {
				t.Fatalf("popped %d, want %d", got, want[0])
			}
			want = want[1:]
		}
	}
	if len(h) != len(want) {
		t.Fatalf("%d left, want %d", len(h), len(want))
	}
}
