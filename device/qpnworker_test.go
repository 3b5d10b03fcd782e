package device

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
	"github.com/softfabric/softfabric/dataplane/verbs"
)

// Options.QPNWorker: a new queue pair's random number maps to the worker
// that owns it; numbers asked for and reserved ones are not steered, and a
// mapping that never names a worker does not stall its queue pairs.
func TestQPNWorker(t *testing.T) {
	var ls []link.Link
	for range 3 {
		x, _ := memlink.NewPair(memlink.Config{})
		ls = append(ls, x)
	}
	d := NewWorkers(ls, Options{Name: "x", MTU: 1500, QPNWorker: func(q uint32) int { return int(q % 2) }})
	defer d.Close()
	cq := verbs.NewCQ(1024)
	for i := range 60 {
		w := i % 3
		q, err := d.NewRC(QPConfig{SendCQ: cq, RecvCQ: cq, RQ: verbs.NewRecvQueue(1), Worker: w}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if w < 2 && int(q.QPN()%2) != w || d.WorkerOf(q.QPN()) != w {
			t.Fatalf("QPN %d on worker %d", q.QPN(), w)
		}
	}
	if q, err := d.NewUD(QPConfig{SendCQ: cq, RecvCQ: cq, RQ: verbs.NewRecvQueue(1), Worker: 1, QPN: 100}, 0); err != nil || q.QPN() != 100 {
		t.Fatalf("QPN 100 asked for: %v", err)
	}
	if q, err := d.NewUD(QPConfig{SendCQ: cq, RecvCQ: cq, RQ: verbs.NewRecvQueue(1), Worker: 1}, 0); err != nil || q.QPN()%2 != 1 {
		t.Fatalf("UD on worker 1: %v", err)
	}
}
