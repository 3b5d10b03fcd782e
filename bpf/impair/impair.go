// Package impair injects faults into real kernel traffic: a tc (tcx) BPF
// program that drops, corrupts and duplicates frames at configurable rates,
// for tests on kernels that have no netem.
//
// Attach it to the egress of the sending interface or the ingress of the
// receiving one. Rates are independent draws per frame, in that order: a
// dropped frame is gone; a surviving frame may be cloned (the copy is
// pristine) and then have one random bit of its UDP payload flipped, with
// the checksums left as they are, so that the receiver's own integrity check
// (RoCE's ICRC) is what catches it.
//
// A frame is one skb: on egress a GSO super-packet (TCP TSO, UDP_SEGMENT)
// is impaired as a whole, before it is split.
package impair

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel impair impair.c

// PPM is a probability of one: rates are in parts per million.
const PPM = 1_000_000

// RoCEv2Port is the UDP destination port of RoCEv2, the usual UDPPort.
const RoCEv2Port = 4791

// cloneMark is CLONE_MARK in impair.c: the skb mark that tells the program
// a frame is its own duplicate. Such a frame leaves with mark 0.
const cloneMark = 0x1a4b5eed

// Direction is the tc hook an impairment sits on.
type Direction int

const (
	// Egress impairs frames an interface sends. Duplicates are sent again
	// on the same interface, straight away, so on veth the copy arrives
	// immediately before the original.
	Egress Direction = iota
	// Ingress impairs frames an interface receives, after XDP and GRO:
	// frames an XDP program redirects (to AF_XDP, say) never get here.
	// Duplicates are queued to the interface's backlog and arrive after
	// the original.
	Ingress
)

func (d Direction) String() string {
	switch d {
	case Egress:
		return "egress"
	case Ingress:
		return "ingress"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Config sets the rates, each in parts per million (0 to PPM), and which
// frames they apply to.
type Config struct {
	DropPPM      uint32
	CorruptPPM   uint32
	DuplicatePPM uint32
	// UDPPort restricts impairment to UDP datagrams to this destination
	// port, over IPv4 or IPv6, with or without a VLAN tag, so that ARP,
	// ICMP and TCP pass untouched. 0 impairs every frame; corruption then
	// hits anything after the Ethernet header of a frame that is not UDP.
	UDPPort uint16
}

func (c Config) validate() error {
	for _, r := range []struct {
		name string
		ppm  uint32
	}{{"drop", c.DropPPM}, {"corrupt", c.CorruptPPM}, {"duplicate", c.DuplicatePPM}} {
		if r.ppm > PPM {
			return fmt.Errorf("impair: %s rate %d ppm is above %d", r.name, r.ppm, PPM)
		}
	}
	return nil
}

// Counters count frames since Attach, summed over CPUs. Clones made for
// duplication are not counted as seen.
type Counters struct {
	Seen       uint64 // every frame through the hook
	Matched    uint64 // frames the UDPPort filter let in
	Dropped    uint64
	Corrupted  uint64
	Duplicated uint64
}

// Impairment is a loaded and attached impairment program.
type Impairment struct {
	objs impairObjects
	link link.Link
}

// Attach loads the program and attaches it to the interface with tcx
// (Linux 6.6 or newer): last on egress and first on ingress, so that it
// acts like the wire, and other tcx programs on the interface keep running
// (it passes frames on with TCX_NEXT). ifindex is resolved in the network
// namespace of the calling thread: call Attach inside the interface's
// namespace (netnstest's Host.Do). The returned Impairment may then be used
// from anywhere.
//
// Older kernels lack tcx; there the same program would have to be attached
// as a direct-action cls_bpf filter under a clsact qdisc (netlink: add
// qdisc clsact, then a bpf filter with DirectAction on its ingress or
// egress parent), which returns TC_ACT_UNSPEC just the same.
func Attach(ifindex int, dir Direction, cfg Config) (*Impairment, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var (
		attach ebpf.AttachType
		anchor link.Anchor
	)
	switch dir {
	case Egress:
		attach, anchor = ebpf.AttachTCXEgress, link.Tail()
	case Ingress:
		attach, anchor = ebpf.AttachTCXIngress, link.Head()
	default:
		return nil, fmt.Errorf("impair: unknown direction %d", dir)
	}
	i, err := load(cfg)
	if err != nil {
		return nil, err
	}
	prog := i.objs.ImpairEgress
	if dir == Ingress {
		prog = i.objs.ImpairIngress
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: attach, Anchor: anchor})
	if err != nil {
		i.objs.Close()
		return nil, fmt.Errorf("impair: attaching to %s of ifindex %d: %w", dir, ifindex, err)
	}
	i.link = l
	return i, nil
}

// load loads the program and its maps without attaching it.
func load(cfg Config) (*Impairment, error) {
	i := &Impairment{}
	if err := loadImpairObjects(&i.objs, nil); err != nil {
		return nil, fmt.Errorf("impair: loading program: %w", err)
	}
	if err := i.Set(cfg); err != nil {
		i.objs.Close()
		return nil, err
	}
	return i, nil
}

// Set changes the configuration of a running impairment. Frames in flight
// may see a mix of the old and the new values for a moment.
func (i *Impairment) Set(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	v := impairConfig{
		DropPpm:      cfg.DropPPM,
		CorruptPpm:   cfg.CorruptPPM,
		DuplicatePpm: cfg.DuplicatePPM,
		UdpPort:      cfg.UDPPort,
	}
	if err := i.objs.Config.Put(uint32(0), &v); err != nil {
		return fmt.Errorf("impair: setting config: %w", err)
	}
	return nil
}

// Counters returns the counters summed over all CPUs.
func (i *Impairment) Counters() (Counters, error) {
	var per []impairCounters
	if err := i.objs.Counters.Lookup(uint32(0), &per); err != nil {
		return Counters{}, fmt.Errorf("impair: reading counters: %w", err)
	}
	var c Counters
	for _, p := range per {
		c.Seen += p.Seen
		c.Matched += p.Matched
		c.Dropped += p.Dropped
		c.Corrupted += p.Corrupted
		c.Duplicated += p.Duplicated
	}
	return c, nil
}

// Close detaches the program and frees it. Frames are clean again once it
// returns.
func (i *Impairment) Close() error {
	var err error
	if i.link != nil {
		err = i.link.Close()
		i.link = nil
	}
	return errors.Join(err, i.objs.Close())
}

// ParsePercent turns a percentage such as "5%", "0.5%" or "20" (the % sign
// is optional) into parts per million, for flags and test tables. It
// accepts 0 to 100 with at most four decimal places (1 ppm = 0.0001 %).
func ParsePercent(s string) (uint32, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("impair: %q is not a percentage", s)
	}
	if f < 0 || f > 100 {
		return 0, fmt.Errorf("impair: %q is not between 0 and 100 %%", s)
	}
	ppm := f * PPM / 100
	if r := math.Round(ppm); math.Abs(ppm-r) > 1e-6 {
		return 0, fmt.Errorf("impair: %q is finer than 1 ppm (0.0001 %%)", s)
	}
	return uint32(math.Round(ppm)), nil
}
