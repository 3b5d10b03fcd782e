// Package memswitch is an in-memory Ethernet switch: any number of ports,
// each a link.Link, delivering frames by destination MAC address within one
// process. It carries fabric's in-process provider (several domains of one
// program talking without a NIC) and tests with more than two hosts.
//
// A port keeps a bounded queue of frame copies; a frame for a full queue,
// or for an address no port has, is dropped and counted, as a switch
// would. A port is also an engine.Sleeper: an idle worker blocks in it
// until a frame arrives or it is woken.
package memswitch

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrAddressInUse is returned by Port for a MAC address another port has.
var ErrAddressInUse = errors.New("memswitch: address in use")

// Switch connects ports.
type Switch struct {
	maxFrame int
	mu       sync.RWMutex
	ports    map[[6]byte]*Port
}

// New returns a switch for frames of up to maxFrame bytes.
func New(maxFrame int) *Switch {
	return &Switch{maxFrame: maxFrame, ports: map[[6]byte]*Port{}}
}

// Stats count a port's frames.
type Stats struct {
	Received uint64 // queued for this port
	Dropped  uint64 // for this port, its queue full
	Unknown  uint64 // sent by this port to an address no port has
}

// Port is one attachment to the switch. Send and Recv may be called from
// different goroutines; each takes the queue's mutex once per batch.
type Port struct {
	sw  *Switch
	mac [6]byte

	mu    sync.Mutex
	slots [][]byte
	sizes []int
	head  uint64
	tail  uint64

	sleeping atomic.Bool
	wake     chan struct{}
	timer    *time.Timer

	received, dropped, unknown atomic.Uint64
}

// Port attaches a port with address mac and room for depth frames.
func (s *Switch) Port(mac [6]byte, depth int) (*Port, error) {
	n := 1
	for n < depth {
		n <<= 1
	}
	p := &Port{sw: s, mac: mac, slots: make([][]byte, n), sizes: make([]int, n), wake: make(chan struct{}, 1)}
	for i := range p.slots {
		p.slots[i] = make([]byte, s.maxFrame)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ports[mac]; ok {
		return nil, fmt.Errorf("port %x: %w", mac, ErrAddressInUse)
	}
	s.ports[mac] = p
	return p, nil
}

// Has reports whether a port has address mac: the switch's answer to
// address resolution.
func (s *Switch) Has(mac [6]byte) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.ports[mac]
	return ok
}

// Close detaches the port; frames for it are dropped from then on.
func (p *Port) Close() error {
	p.sw.mu.Lock()
	defer p.sw.mu.Unlock()
	if p.sw.ports[p.mac] == p {
		delete(p.sw.ports, p.mac)
	}
	return nil
}

// MaxFrame is the largest frame the switch carries.
func (p *Port) MaxFrame() int { return p.sw.maxFrame }

// Send delivers a copy of each frame to the port its destination address
// names (every other port for a broadcast or multicast address). It takes
// every frame: what cannot be delivered is dropped and counted.
func (p *Port) Send(frames [][]byte) (int, error) {
	p.sw.mu.RLock()
	defer p.sw.mu.RUnlock()
	for _, f := range frames {
		if len(f) > p.sw.maxFrame || len(f) < 14 {
			return 0, fmt.Errorf("memswitch: %d-byte frame", len(f))
		}
		var dst [6]byte
		copy(dst[:], f)
		if dst[0]&1 != 0 {
			for _, o := range p.sw.ports {
				if o != p {
					o.put(f)
				}
			}
			continue
		}
		o := p.sw.ports[dst]
		if o == nil {
			p.unknown.Add(1)
			continue
		}
		o.put(f)
	}
	return len(frames), nil
}

func (p *Port) put(f []byte) {
	p.mu.Lock()
	if p.tail-p.head >= uint64(len(p.slots)) {
		p.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	i := p.tail & uint64(len(p.slots)-1)
	p.sizes[i] = copy(p.slots[i], f)
	p.tail++
	p.mu.Unlock()
	p.received.Add(1)
	if p.sleeping.Load() {
		p.Wake()
	}
}

// Recv copies waiting frames into bufs, oldest first.
func (p *Port) Recv(bufs [][]byte, sizes []int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(bufs) && p.head != p.tail {
		i := p.head & uint64(len(p.slots)-1)
		sizes[n] = copy(bufs[n][:cap(bufs[n])], p.slots[i][:p.sizes[i]])
		p.head++
		n++
	}
	return n, nil
}

func (p *Port) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.head != p.tail
}

// Sleep blocks until a frame arrives, Wake is called or timeout passes.
// One goroutine sleeps in a port at a time.
func (p *Port) Sleep(timeout time.Duration) error {
	p.sleeping.Store(true)
	defer p.sleeping.Store(false)
	if p.waiting() {
		return nil
	}
	if p.timer == nil {
		p.timer = time.NewTimer(timeout)
	} else {
		p.timer.Reset(timeout)
	}
	select {
	case <-p.wake:
	case <-p.timer.C:
	}
	p.timer.Stop()
	return nil
}

// Wake makes a Sleep in progress, or the next one, return.
func (p *Port) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stats returns the port's counters.
func (p *Port) Stats() Stats {
	return Stats{Received: p.received.Load(), Dropped: p.dropped.Load(), Unknown: p.unknown.Load()}
}
