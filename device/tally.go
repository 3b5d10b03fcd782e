package device

import (
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/ctrl/daemonapi"
	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/dataplane/rc"
)

// TransportStats are the transport's counters summed over a device's
// queue pairs, those destroyed included: what an attached application
// reports to its daemon, which exports them (Prometheus) and shows them in
// `status`.
type TransportStats = daemonapi.Transport

// addStats adds an RC queue pair's counters to t.
func addStats(t *TransportStats, s rc.Stats) {
	t.Add(TransportStats{Retransmits: s.Retransmits, Timeouts: s.Timeouts, LateTimeouts: s.LateTimeouts, SeqNAKsSent: s.SeqNAKsSent, SeqNAKsRcvd: s.SeqNAKsRcvd,
		RNRNAKsSent: s.RNRNAKsSent, RNRNAKsRcvd: s.RNRNAKsRcvd, ErrNAKsSent: s.ErrNAKsSent, ErrNAKsRcvd: s.ErrNAKsRcvd,
		Misaddressed: s.Misaddressed})
}

// tally is one worker's published sum of its queue pairs' counters: the
// worker writes it (it owns the counters it reads), anyone reads it.
type tally struct {
	v       atomic.Pointer[TransportStats]
	retired TransportStats // destroyed queue pairs (the worker's own)
	last    int64          // engine clock of the last publication
}

// tallyEvery is how often a worker publishes its counters.
const tallyEvery = int64(100 * time.Millisecond)

// tallyWorker publishes worker w's counters, at most every tallyEvery.
// It runs on the worker's goroutine (or under its manual progress).
func (d *Device) tallyWorker(w int, now int64) {
	t := &d.tallies[w]
	if now-t.last < tallyEvery {
		return
	}
	t.last = now
	sum := t.retired
	d.qpMu.Lock()
	for n, q := range d.qps {
		if r, ok := q.(*rc.QP); ok && d.group.Owner(n) == w {
			addStats(&sum, r.Stats())
		}
	}
	d.qpMu.Unlock()
	t.v.Store(&sum)
}

// retire keeps the counters of a queue pair being destroyed by worker w.
func (d *Device) retire(w int, q engine.QP) {
	if r, ok := q.(*rc.QP); ok && w >= 0 && w < len(d.tallies) {
		addStats(&d.tallies[w].retired, r.Stats())
	}
}

// SetOverruns installs what TransportStats reports as CQ overruns (the
// fabric's completion queues live above the device).
func (d *Device) SetOverruns(f func() uint64) { d.overruns.Store(&f) }

// TransportStats sums what the workers last published (at most 100 ms
// old while they run).
func (d *Device) TransportStats() TransportStats {
	var s TransportStats
	for i := range d.tallies {
		if v := d.tallies[i].v.Load(); v != nil {
			s.Add(*v)
		}
	}
	if f := d.overruns.Load(); f != nil {
		s.CQOverruns = (*f)()
	}
	return s
}
