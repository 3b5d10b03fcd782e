package engine

// The scheduler keeps the transmit pass and the timer lookup proportional
// to the queue pairs that have something to do, not to all of them: a
// device may carry thousands of connections of which a few are busy.
//
//   - A queue pair is active when it may have packets to send: after it
//     received a packet, after the application posted work (its doorbell),
//     or when one of its timers fell due. The transmit pass visits only
//     active queue pairs and drops those left with nothing to send.
//   - Timers live in a min-heap of (deadline, slot) entries. A queue pair's
//     deadline is read back after each pass over it; a changed deadline
//     pushes a new entry and the old one is skipped when it surfaces.

// Notifier is implemented by queue pairs that can tell the engine when the
// application gives them work (rc.QP and ud.QP do).
type Notifier interface {
	SetNotify(func())
}

type slot struct {
	q        QP
	active   bool
	deadline int64 // the deadline last read from q (0: none)
}

type timer struct {
	deadline int64
	slot     int32
}

// timerHeap is a binary min-heap by deadline, written out rather than
// through container/heap, whose interface{} arguments would allocate.
type timerHeap []timer

func (h *timerHeap) push(t timer) {
	*h = append(*h, t)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].deadline <= a[i].deadline {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *timerHeap) pop() timer {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].deadline < a[m].deadline {
			m = l
		}
		if r < len(a) && a[r].deadline < a[m].deadline {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// activate puts a slot on the active list.
func (n *Node) activate(s int32) {
	st := &n.slots[s]
	if st.q != nil && !st.active {
		st.active = true
		n.active = append(n.active, s)
	}
}

// rearm records a queue pair's current deadline, queueing a timer entry
// when it changed.
func (n *Node) rearm(s int32) {
	st := &n.slots[s]
	d := st.q.Deadline()
	if d == st.deadline {
		return
	}
	st.deadline = d
	if d != 0 {
		n.timers.push(timer{deadline: d, slot: s})
	}
}

// expire activates the queue pairs whose timers are due at now.
func (n *Node) expire(now int64) {
	for len(n.timers) > 0 && n.timers[0].deadline <= now {
		t := n.timers.pop()
		st := &n.slots[t.slot]
		if st.q != nil && st.deadline == t.deadline {
			st.deadline = 0 // fired; rearm reads the next one
			n.activate(t.slot)
		}
	}
}

// NextDeadline is the earliest timer of any queue pair, 0 if none runs.
func (n *Node) NextDeadline() int64 {
	for len(n.timers) > 0 {
		t := n.timers[0]
		if st := &n.slots[t.slot]; st.q != nil && st.deadline == t.deadline {
			return t.deadline
		}
		n.timers.pop() // stale
	}
	return 0
}
