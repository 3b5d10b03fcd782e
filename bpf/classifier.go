package bpf

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel classifier classifier.c

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Sizes of the classifier's tables; classifier.c defines the same.
const (
	MaxQueues      = 64   // rx queues per interface a context can have a socket on
	MaxContexts    = 16   // receive contexts (AF_XDP sockets per queue)
	MaxRules       = 32   // rules in the rule table
	MaxUnits       = 4    // match units per rule
	MaxPKeys       = 1024 // entries in the P_Key table
	MaxQPs         = 65536
	MaxMatchOffset = 128 // match units read words from the first 128 bytes
)

// Action is what a matching rule does with a frame.
type Action uint32

// Rule actions; the values are those of classifier.c.
const (
	// ActionRedirect sends the frame to the rule's context.
	ActionRedirect Action = iota
	// ActionDrop drops the frame and counts it in Counters.RuleDrop.
	ActionDrop
	// ActionPass hands the frame to the kernel stack.
	ActionPass
)

func (a Action) String() string {
	switch a {
	case ActionRedirect:
		return "redirect"
	case ActionDrop:
		return "drop"
	case ActionPass:
		return "pass"
	}
	return fmt.Sprintf("action(%d)", uint32(a))
}

// MatchUnit matches the 32-bit big-endian word at Offset bytes from the
// start of the frame (the Ethernet header) when word&Mask == Value. A word
// that does not lie wholly inside the frame does not match.
type MatchUnit struct {
	Offset uint16 // at most MaxMatchOffset-4
	Mask   uint32
	Value  uint32 // no bits outside Mask
}

// Rule is one entry of the rule table: it matches a frame when all its
// units do, and the first enabled rule that matches decides the frame's
// fate before the QPN lookup. Rules see only RoCEv2 frames that passed the
// version and P_Key checks.
type Rule struct {
	Units   []MatchUnit // 1 to MaxUnits
	Action  Action
	Context uint32 // for ActionRedirect, below MaxContexts
}

// Counters are the classifier's counters, summed over CPUs.
type Counters struct {
	Redirected uint64 // handed to an AF_XDP socket
	// Passed counts every frame given to the kernel: non-RoCEv2 traffic,
	// IPv4 fragments, IPv6 with extension headers, and ActionPass rules.
	Passed     uint64
	BadVersion uint64 // BTH transport version not 0
	BadPKey    uint64 // P_Key not in the table
	UnknownQPN uint64 // no rule matched and the QPN has no context
	Short      uint64 // UDP port 4791 but no room for a BTH
	NoSocket   uint64 // the context has no socket on the arrival queue
	RuleDrop   uint64 // dropped by an ActionDrop rule
	RuleHits   [MaxRules]uint64
	// QueueRedirected counts Redirected by the receive queue the frames
	// arrived on: what each queue's socket (and worker) was given.
	QueueRedirected [MaxQueues]uint64
}

// Counter slots in the per-CPU array, in the order of classifier.c.
const (
	cntRedirected = iota
	cntPassed
	cntBadVersion
	cntBadPKey
	cntUnknownQPN
	cntShort
	cntNoSocket
	cntRuleDrop
	cntRuleHit
	cntQueueRedirected = cntRuleHit + MaxRules
	cntMax             = cntQueueRedirected + MaxQueues
)

// Errors.
var (
	// ErrAlreadyAttached is returned by Attach when the interface already
	// has an XDP program that this Classifier did not attach.
	ErrAlreadyAttached = errors.New("bpf: interface already has an XDP program")
	// ErrInvalid is wrapped by the errors for arguments out of range.
	ErrInvalid = errors.New("bpf: invalid argument")
	// ErrNotLoaded is returned for operations that need the program when a
	// Classifier was opened from pins that hold none.
	ErrNotLoaded = errors.New("bpf: classifier program not loaded")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Options select what Load loads.
type Options struct {
	// Frags loads the xdp.frags variant (BPF_F_XDP_HAS_FRAGS), which an
	// interface with an MTU above a page's worth of frame, or an AF_XDP
	// socket with multi-buffer, needs. It parses the linear part only.
	Frags bool
}

// Classifier is the loaded classifier: its maps, its program and, once
// attached, its XDP link. Its methods may be called from several
// goroutines; the tables are owned by one writer at a time (softfabric up),
// which other processes join through Open.
type Classifier struct {
	maps classifierMaps
	prog *ebpf.Program // nil when opened from pins without a program
	link link.Link     // nil until attached
	pin  string        // pin directory, "" until pinned
}

// Load loads the maps and the program into the kernel. Nothing is attached
// or pinned.
func Load(o Options) (*Classifier, error) {
	spec, err := loadClassifier()
	if err != nil {
		return nil, fmt.Errorf("bpf: loading classifier: %w", err)
	}
	name := classifierProgClassifier
	if o.Frags {
		name = classifierProgClassifierFrags
	}
	// Load only the chosen variant.
	for n := range spec.Programs {
		if n != name {
			delete(spec.Programs, n)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("bpf: loading classifier: %w", err)
	}
	defer coll.Close() // Assign takes what it assigns out of coll
	c := &Classifier{prog: coll.Programs[name]}
	delete(coll.Programs, name)
	if err := coll.Assign(&c.maps); err != nil {
		c.prog.Close()
		return nil, fmt.Errorf("bpf: loading classifier: %w", err)
	}
	return c, nil
}

// Program returns the classifier's XDP program, nil for a Classifier opened
// from pins that hold none.
func (c *Classifier) Program() *ebpf.Program { return c.prog }

// ProgramID returns the kernel's id of the program.
func (c *Classifier) ProgramID() (uint32, error) {
	if c.prog == nil {
		return 0, ErrNotLoaded
	}
	info, err := c.prog.Info()
	if err != nil {
		return 0, fmt.Errorf("bpf: program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, fmt.Errorf("bpf: program info: kernel reports no id")
	}
	return uint32(id), nil
}

// Close closes the classifier's file descriptors. A program attached through
// a pinned link stays attached; an unpinned link is detached.
func (c *Classifier) Close() error {
	var errs []error
	if c.link != nil {
		errs = append(errs, c.link.Close())
		c.link = nil
	}
	if c.prog != nil {
		errs = append(errs, c.prog.Close())
		c.prog = nil
	}
	errs = append(errs, c.maps.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bpf: closing classifier: %w", err)
	}
	return nil
}

// AllowPKey adds pkey to the P_Key table. Entries are keyed by the low 15
// bits: the membership bit (0x8000: full, clear: limited) is kept for
// PKeys but not checked, so allowing 0xffff admits frames carrying 0xffff
// and 0x7fff alike.
func (c *Classifier) AllowPKey(pkey uint16) error {
	if pkey&0x7fff == 0 {
		return invalid("p_key %#04x is the invalid P_Key", pkey)
	}
	if err := c.maps.Pkeys.Update(pkey&0x7fff, pkey, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: allowing p_key %#04x: %w", pkey, err)
	}
	return nil
}

// RemovePKey removes the entry for pkey's low 15 bits. It wraps
// ebpf.ErrKeyNotExist when there is none.
func (c *Classifier) RemovePKey(pkey uint16) error {
	if err := c.maps.Pkeys.Delete(pkey & 0x7fff); err != nil {
		return fmt.Errorf("bpf: removing p_key %#04x: %w", pkey, err)
	}
	return nil
}

// PKeys returns the P_Key table, sorted, each P_Key as it was allowed.
func (c *Classifier) PKeys() ([]uint16, error) {
	var (
		k, v uint16
		out  []uint16
	)
	it := c.maps.Pkeys.Iterate()
	for it.Next(&k, &v) {
		out = append(out, v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf: reading p_keys: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// SetQP routes frames for destination QP qpn (24 bits) to context ctx.
func (c *Classifier) SetQP(qpn, ctx uint32) error {
	if qpn > 0xffffff {
		return invalid("qpn %#x is wider than 24 bits", qpn)
	}
	if ctx >= MaxContexts {
		return invalid("context %d out of range [0, %d)", ctx, MaxContexts)
	}
	if err := c.maps.QpContexts.Update(qpn, ctx, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: setting qp %#x: %w", qpn, err)
	}
	return nil
}

// DeleteQP removes the route for qpn. It wraps ebpf.ErrKeyNotExist when
// there is none.
func (c *Classifier) DeleteQP(qpn uint32) error {
	if err := c.maps.QpContexts.Delete(qpn); err != nil {
		return fmt.Errorf("bpf: deleting qp %#x: %w", qpn, err)
	}
	return nil
}

// QPs returns the QP table: destination QPN to context.
func (c *Classifier) QPs() (map[uint32]uint32, error) {
	var k, v uint32
	out := map[uint32]uint32{}
	it := c.maps.QpContexts.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("bpf: reading qps: %w", err)
	}
	return out, nil
}

func checkRule(i int, r Rule) error {
	if i < 0 || i >= MaxRules {
		return invalid("rule index %d out of range [0, %d)", i, MaxRules)
	}
	if len(r.Units) == 0 || len(r.Units) > MaxUnits {
		return invalid("rule %d has %d match units, want 1 to %d", i, len(r.Units), MaxUnits)
	}
	for j, u := range r.Units {
		if u.Offset > MaxMatchOffset-4 {
			return invalid("rule %d unit %d: offset %d beyond %d", i, j, u.Offset, MaxMatchOffset-4)
		}
		if u.Value&^u.Mask != 0 {
			return invalid("rule %d unit %d: value %#x has bits outside mask %#x", i, j, u.Value, u.Mask)
		}
	}
	switch r.Action {
	case ActionRedirect:
		if r.Context >= MaxContexts {
			return invalid("rule %d: context %d out of range [0, %d)", i, r.Context, MaxContexts)
		}
	case ActionDrop, ActionPass:
	default:
		return invalid("rule %d: unknown action %d", i, uint32(r.Action))
	}
	return nil
}

// SetRule writes rule i. Rules are checked in index order. A frame in
// flight while a rule is rewritten may see it half written; change rules
// before traffic that depends on them starts.
func (c *Classifier) SetRule(i int, r Rule) error {
	if err := checkRule(i, r); err != nil {
		return err
	}
	var raw classifierRule
	raw.Nunits = uint32(len(r.Units))
	raw.Action = uint32(r.Action)
	raw.Context = r.Context
	for j, u := range r.Units {
		raw.Units[j].Offset = uint32(u.Offset)
		raw.Units[j].Mask = u.Mask
		raw.Units[j].Value = u.Value
	}
	if err := c.maps.Rules.Update(uint32(i), &raw, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: setting rule %d: %w", i, err)
	}
	return c.syncRuleCount()
}

// DeleteRule disables rule i; deleting an empty slot is not an error.
func (c *Classifier) DeleteRule(i int) error {
	if i < 0 || i >= MaxRules {
		return invalid("rule index %d out of range [0, %d)", i, MaxRules)
	}
	var raw classifierRule
	if err := c.maps.Rules.Update(uint32(i), &raw, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: deleting rule %d: %w", i, err)
	}
	return c.syncRuleCount()
}

// Rules returns the enabled rules by index.
func (c *Classifier) Rules() (map[int]Rule, error) {
	raws, err := c.readRules()
	if err != nil {
		return nil, err
	}
	out := map[int]Rule{}
	for i, raw := range raws {
		if raw.Nunits == 0 || raw.Nunits > MaxUnits {
			continue
		}
		r := Rule{Action: Action(raw.Action), Context: raw.Context}
		for _, u := range raw.Units[:raw.Nunits] {
			r.Units = append(r.Units, MatchUnit{Offset: uint16(u.Offset), Mask: u.Mask, Value: u.Value})
		}
		out[i] = r
	}
	return out, nil
}

func (c *Classifier) readRules() ([]classifierRule, error) {
	raws := make([]classifierRule, MaxRules)
	for i := range raws {
		if err := c.maps.Rules.Lookup(uint32(i), &raws[i]); err != nil {
			return nil, fmt.Errorf("bpf: reading rule %d: %w", i, err)
		}
	}
	return raws, nil
}

// syncRuleCount stores one past the highest enabled rule, where the program
// stops scanning the table.
func (c *Classifier) syncRuleCount() error {
	raws, err := c.readRules()
	if err != nil {
		return err
	}
	var cfg classifierConfig
	for i, raw := range raws {
		if raw.Nunits != 0 {
			cfg.Nrules = uint32(i + 1)
		}
	}
	if err := c.maps.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: updating rule count: %w", err)
	}
	return nil
}

func socketKey(ctx, queue int) (uint32, error) {
	if ctx < 0 || ctx >= MaxContexts {
		return 0, invalid("context %d out of range [0, %d)", ctx, MaxContexts)
	}
	if queue < 0 || queue >= MaxQueues {
		return 0, invalid("queue %d out of range [0, %d)", queue, MaxQueues)
	}
	return uint32(ctx*MaxQueues + queue), nil
}

// SetSocket makes fd, an AF_XDP socket bound to rx queue queue of the
// interface the classifier is attached to, the socket of context ctx on
// that queue.
func (c *Classifier) SetSocket(ctx, queue int, fd int) error {
	key, err := socketKey(ctx, queue)
	if err != nil {
		return err
	}
	if fd < 0 {
		return invalid("socket fd %d", fd)
	}
	if err := c.maps.Xsks.Update(key, uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("bpf: setting socket of context %d queue %d: %w", ctx, queue, err)
	}
	return nil
}

// DeleteSocket removes the socket of context ctx on queue; frames for it are
// then dropped and counted in NoSocket. Deleting an empty slot is not an
// error.
func (c *Classifier) DeleteSocket(ctx, queue int) error {
	key, err := socketKey(ctx, queue)
	if err != nil {
		return err
	}
	if err := c.maps.Xsks.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpf: deleting socket of context %d queue %d: %w", ctx, queue, err)
	}
	return nil
}

// Counters returns the counters summed over CPUs.
func (c *Classifier) Counters() (Counters, error) {
	var (
		out    Counters
		percpu []uint64
	)
	verdicts := [cntRuleHit]*uint64{
		cntRedirected: &out.Redirected,
		cntPassed:     &out.Passed,
		cntBadVersion: &out.BadVersion,
		cntBadPKey:    &out.BadPKey,
		cntUnknownQPN: &out.UnknownQPN,
		cntShort:      &out.Short,
		cntNoSocket:   &out.NoSocket,
		cntRuleDrop:   &out.RuleDrop,
	}
	// A map pinned by an older `up` may have fewer slots (no per-queue
	// counts): read what it has.
	for slot := range min(uint32(cntMax), c.maps.Counters.MaxEntries()) {
		if err := c.maps.Counters.Lookup(slot, &percpu); err != nil {
			return Counters{}, fmt.Errorf("bpf: reading counters: %w", err)
		}
		var sum uint64
		for _, v := range percpu {
			sum += v
		}
		switch {
		case slot < cntRuleHit:
			*verdicts[slot] = sum
		case slot < cntQueueRedirected:
			out.RuleHits[slot-cntRuleHit] = sum
		default:
			out.QueueRedirected[slot-cntQueueRedirected] = sum
		}
	}
	return out, nil
}

// ResetCounters sets every counter to zero. Frames counted while it runs
// may be lost from the totals.
func (c *Classifier) ResetCounters() error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("bpf: resetting counters: %w", err)
	}
	zero := make([]uint64, n)
	for slot := range min(uint32(cntMax), c.maps.Counters.MaxEntries()) {
		if err := c.maps.Counters.Update(slot, zero, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("bpf: resetting counters: %w", err)
		}
	}
	return nil
}
