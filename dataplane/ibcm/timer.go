package ibcm

// The timers are a binary min-heap of connections by deadline; a
// connection has at most one timer, whose meaning its state gives.

func (a *Agent) schedule(c *conn, deadline int64) {
	c.deadline = deadline
	if c.heapIdx >= 0 {
		a.fix(c.heapIdx)
		return
	}
	c.heapIdx = len(a.timers)
	a.timers = append(a.timers, c)
	a.up(c.heapIdx)
}

func (a *Agent) unschedule(c *conn) {
	if c.heapIdx < 0 {
		return
	}
	i, last := c.heapIdx, len(a.timers)-1
	if i != last {
		a.swap(i, last)
	}
	a.timers[last] = nil
	a.timers = a.timers[:last]
	if i != last {
		a.fix(i)
	}
	c.heapIdx = -1
	c.deadline = 0
}

func (a *Agent) fix(i int) {
	if !a.down(i) {
		a.up(i)
	}
}

func (a *Agent) less(i, j int) bool { return a.timers[i].deadline < a.timers[j].deadline }

func (a *Agent) swap(i, j int) {
	t := a.timers
	t[i], t[j] = t[j], t[i]
	t[i].heapIdx = i
	t[j].heapIdx = j
}

func (a *Agent) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !a.less(i, p) {
			return
		}
		a.swap(i, p)
		i = p
	}
}

func (a *Agent) down(i int) bool {
	start, n := i, len(a.timers)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && a.less(r, l) {
			j = r
		}
		if !a.less(j, i) {
			break
		}
		a.swap(i, j)
		i = j
	}
	return i > start
}
