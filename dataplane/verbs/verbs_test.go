package verbs

import (
	"errors"
	"sync"
	"testing"

	"github.com/softfabric/softfabric/dataplane/mr"
)

func TestCQOrderAndOverflow(t *testing.T) {
	cq := NewCQ(5) // rounds up to 8
	if cq.Cap() != 8 {
		t.Fatalf("cap %d, want 8", cq.Cap())
	}
	for i := 0; i < 8; i++ {
		if !cq.Push(&Completion{WRID: uint64(i)}) {
			t.Fatalf("push %d refused", i)
		}
	}
	if cq.Push(&Completion{WRID: 99}) || cq.Overflows() != 1 {
		t.Fatal("push into a full CQ accepted")
	}
	out := make([]Completion, 3)
	for want := uint64(0); want < 8; {
		n := cq.Poll(out)
		for i := 0; i < n; i++ {
			if out[i].WRID != want {
				t.Fatalf("polled %d, want %d", out[i].WRID, want)
			}
			want++
		}
	}
	if cq.Len() != 0 || cq.Poll(out) != 0 {
		t.Fatal("entries left after draining")
	}
}

// TestCQConcurrent: one producer and one consumer goroutine, run under
// -race by make test.
func TestCQConcurrent(t *testing.T) {
	cq := NewCQ(64)
	const n = 200000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; {
			if cq.Push(&Completion{WRID: uint64(i), ByteLen: uint32(i)}) {
				i++
			}
		}
	}()
	out := make([]Completion, 16)
	for want := 0; want < n; {
		k := cq.Poll(out)
		for i := 0; i < k; i++ {
			if out[i].WRID != uint64(want) || out[i].ByteLen != uint32(want) {
				t.Fatalf("got %+v, want %d", out[i], want)
			}
			want++
		}
	}
	wg.Wait()
}

func TestRecvQueue(t *testing.T) {
	q := NewRecvQueue(2)
	sgl := []mr.SGE{{Addr: 1, Length: 10}, {Addr: 100, Length: 20}}
	if err := q.Post(&RecvWR{ID: 1, SGL: sgl}); err != nil {
		t.Fatal(err)
	}
	if err := q.Post(&RecvWR{ID: 2}); err != nil {
		t.Fatal(err)
	}
	if err := q.Post(&RecvWR{ID: 3}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("post to a full queue: %v", err)
	}
	if err := q.Post(&RecvWR{SGL: make([]mr.SGE, MaxSGE+1)}); !errors.Is(err, ErrTooManySGE) {
		t.Fatalf("too many SGEs: %v", err)
	}
	s := q.Peek()
	sgl[0].Length = 999 // posting copied the list
	if s.ID != 1 || s.Len() != 30 || len(s.SGL()) != 2 || s.SGL()[0].Length != 10 {
		t.Fatalf("slot %+v", s)
	}
	q.Pop()
	if q.Peek().ID != 2 {
		t.Fatal("not FIFO")
	}
	q.Pop()
	if q.Peek() != nil || q.Len() != 0 {
		t.Fatal("queue not empty")
	}
	q.Pop() // harmless on empty
}

func TestTransitions(t *testing.T) {
	legal := map[[2]QPState]bool{
		{StateReset, StateInit}: true, {StateInit, StateInit}: true, {StateInit, StateRTR}: true,
		{StateRTR, StateRTS}: true, {StateRTS, StateRTS}: true, {StateRTS, StateSQD}: true,
		{StateSQD, StateSQD}: true, {StateSQD, StateRTS}: true, {StateSQE, StateRTS}: true,
	}
	all := []QPState{StateReset, StateInit, StateRTR, StateRTS, StateSQD, StateSQE, StateErr}
	for _, from := range all {
		for _, to := range all {
			want := legal[[2]QPState{from, to}] || to == StateReset || to == StateErr
			err := CheckTransition(from, to)
			if (err == nil) != want {
				t.Errorf("%v → %v: err %v, legal %v", from, to, err, want)
			}
			if err != nil && !errors.Is(err, ErrBadTransition) {
				t.Errorf("%v → %v: error %v does not wrap ErrBadTransition", from, to, err)
			}
		}
	}
}

func TestNames(t *testing.T) {
	if OpFetchAdd.String() != "ATOMIC_FETCH_AND_ADD" || RetryExcErr.String() != "transport retry counter exceeded" ||
		CompRecvWriteImm.String() != "RECV_RDMA_WITH_IMM" || StateRTS.String() != "RTS" {
		t.Fatal("names")
	}
	if Opcode(200).String() != "Opcode(200)" || Status(200).String() != "Status(200)" {
		t.Fatal("unknown values")
	}
	for op := OpSend; op < numOpcodes; op++ {
		if SendCompOpcode(op).String() == "" {
			t.Fatal(op)
		}
	}
}
