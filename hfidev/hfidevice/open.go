package hfidevice

import (
	"bufio"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/hfilink"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// Errors of opening a unit by name.
var (
	// ErrPortNotActive: the unit's port is not ACTIVE (no link, or no
	// LID from the subnet manager yet).
	ErrPortNotActive = errors.New("hfidevice: port not ACTIVE")
	// ErrPeers: the peers file is missing or malformed.
	ErrPeers = errors.New("hfidevice: peers file")
)

// Host is where a unit opened by name is found: the driver's nodes, its
// sysfs, the peers files, and the system calls that open the nodes.
// DefaultHost is the real one; tests put fake directories and the model
// in its place.
type Host struct {
	Dev    fs.FS  // the directory of the hfi1_N nodes
	DevDir string // its name, in node paths
	// Sysfs is /sys/class/infiniband: hfi1_N/ports/1/{lid,state,gids/0}.
	Sysfs fs.FS
	// PeersDir holds hfi1_N.peers, each unit's default peers file.
	PeersDir string
	// Sys returns the system calls for a node path (sys.Unix{} for real
	// nodes).
	Sys func(path string) sys.Sys
}

// DefaultHost is the host's real driver, sysfs and /etc/softfabric.
var DefaultHost = Host{
	Dev: os.DirFS(hfidev.DevDir), DevDir: hfidev.DevDir,
	Sysfs:    os.DirFS("/sys/class/infiniband"),
	PeersDir: "/etc/softfabric",
	Sys:      func(string) sys.Sys { return sys.Unix{} },
}

func init() {
	device.RegisterOpener(device.Opener{
		Claims: func(name string) bool { _, ok := UnitNumber(name); return ok },
		Open:   func(name string, o device.OpenOptions) (*device.Device, error) { return DefaultHost.Open(name, o) },
	})
}

// UnitNumber parses a unit's name, "hfi1_N".
func UnitNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "hfi1_")
	if !ok || s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Port is what the driver's sysfs says of a unit's port 1.
type Port struct {
	LID   uint16
	GID   netip.Addr // GID index 0: subnet prefix and port GUID
	State string     // "ACTIVE", "DOWN", ...
}

// Port reads unit name's port 1 from sysfs: lid ("0x1"), state ("4:
// ACTIVE") and gids/0 ("fe80:0000:...:0203"), as ib_core's sysfs.c writes
// them.
func (h Host) Port(name string) (Port, error) {
	var p Port
	read := func(f string) (string, error) {
		b, err := fs.ReadFile(h.Sysfs, name+"/ports/1/"+f)
		return strings.TrimSpace(string(b)), err
	}
	lid, err := read("lid")
	if err != nil {
		return p, fmt.Errorf("%w: %s: %w", hfidev.ErrNoDevice, name, err)
	}
	l, err := strconv.ParseUint(lid, 0, 16)
	if err != nil {
		return p, fmt.Errorf("hfidevice: %s: lid %q: %w", name, lid, err)
	}
	p.LID = uint16(l)
	gid, err := read("gids/0")
	if err == nil {
		p.GID, err = netip.ParseAddr(gid)
	}
	if err != nil {
		return p, fmt.Errorf("hfidevice: %s: gids/0: %w", name, err)
	}
	st, err := read("state")
	if err != nil {
		return p, fmt.Errorf("hfidevice: %s: %w", name, err)
	}
	_, p.State, _ = strings.Cut(st, ": ")
	return p, nil
}

// Peers reads a peers file: lines "ADDR LID CTXT[,CTXT...]" (blank lines
// and #-comments skipped). ADDR is the address the transport uses for
// the port (its GID: the IP address the out-of-band exchange runs from,
// or the port GID), LID the port's LID, CTXT its receive contexts in
// worker order.
func Peers(path string) ([]hfilink.Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPeers, err)
	}
	defer f.Close()
	var out []hfilink.Node
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		node, err := parsePeer(fields)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %w", ErrPeers, path, n, err)
		}
		out = append(out, node)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrPeers, path, err)
	}
	return out, nil
}

func parsePeer(fields []string) (hfilink.Node, error) {
	var node hfilink.Node
	if len(fields) != 3 {
		return node, errors.New("want ADDR LID CTXT[,CTXT...]")
	}
	a, err := netip.ParseAddr(fields[0])
	if err != nil {
		return node, err
	}
	node.GID = netip.AddrFrom16(a.As16())
	lid, err := strconv.ParseUint(fields[1], 0, 16)
	if err != nil || lid == 0 {
		return node, fmt.Errorf("LID %q", fields[1])
	}
	node.LID = uint16(lid)
	for c := range strings.SplitSeq(fields[2], ",") {
		n, err := strconv.ParseUint(c, 10, 16)
		if err != nil {
			return node, fmt.Errorf("context %q", c)
		}
		// Two workers cannot both own one context.
		if slices.Contains(node.Ctxts, uint16(n)) {
			return node, fmt.Errorf("context %d listed twice", n)
		}
		node.Ctxts = append(node.Ctxts, uint16(n))
	}
	return node, nil
}

// Contexts reads how many user contexts unit name has (nctxts: the
// fewer of its user receive and send contexts) and how many no process
// has assigned now (nfreectxts), from the files the hfi1 driver's
// sysfs.c writes beside ports/; -1 for a file sysfs does not have.
func (h Host) Contexts(name string) (total, free int, err error) {
	read := func(f string) (int, error) {
		b, err := fs.ReadFile(h.Sysfs, name+"/"+f)
		if errors.Is(err, fs.ErrNotExist) {
			return -1, nil
		}
		if err != nil {
			return -1, fmt.Errorf("hfidevice: %s: %w", name, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 16)
		if err != nil {
			return -1, fmt.Errorf("hfidevice: %s: %s %q", name, f, b)
		}
		return int(n), nil
	}
	if total, err = read("nctxts"); err != nil {
		return -1, -1, err
	}
	free, err = read("nfreectxts")
	return total, free, err
}

// Unit is a unit as opening it by name would see it: its port, its own
// node (LID, the address it goes by and the receive contexts its peers
// send to) and its peers.
type Unit struct {
	Name  string
	Port  Port
	Self  hfilink.Node
	Peers []hfilink.Node
	// Contexts is how many user contexts the unit has (sysfs nctxts;
	// -1 if sysfs does not say).
	Contexts int
}

// Queues is how many queues (contexts, and workers) the unit serves when
// opened: as many as its own peers-file line lists receive contexts,
// since its peers send a packet for QPN q to that line's context q % n
// (hfilink), whatever they opened themselves; one without such a line.
func (u Unit) Queues() int { return max(len(u.Self.Ctxts), 1) }

// CheckQueues says why the unit cannot serve n queues (ErrPeers), nil if
// it can: n must be Queues, for serving fewer contexts than the line lists
// would leave packets in contexts no worker reads (or another process
// owns), and more would draw QPNs that peers send to another context.
func (u Unit) CheckQueues(n int) error {
	lid, have := u.Port.LID, len(u.Self.Ctxts)
	switch {
	case have == 0 && n > 1:
		return fmt.Errorf("%w: %s: no line for LID %d lists the unit's receive contexts; %d queues need one listing %d",
			ErrPeers, u.Name, lid, n, n)
	case have > 0 && n > have:
		return fmt.Errorf("%w: %s: line for LID %d lists %s; %d queues need %d", ErrPeers, u.Name, lid, rcvContexts(have), n, n)
	case have > 0 && n < have:
		return fmt.Errorf("%w: %s: line for LID %d lists %s, which peers send to by QPN; %d queue%s would leave %d unserved",
			ErrPeers, u.Name, lid, rcvContexts(have), n, plural(n), have-n)
	}
	return nil
}

// Queues says how many queues unit u serves if a domain opens it now:
// asked, or Queues where asked is 0. It fails when CheckQueues refuses
// them (ErrPeers) or fewer user contexts than that are free now
// (nfreectxts; device.ErrBusy, as opening would fail).
func (h Host) Queues(u Unit, asked int) (int, error) {
	n := u.Queues()
	if asked > 0 {
		n = asked
	}
	if err := u.CheckQueues(n); err != nil {
		return 0, err
	}
	_, free, err := h.Contexts(u.Name)
	if err != nil {
		return 0, err
	}
	if free >= 0 && free < n {
		return 0, fmt.Errorf("%w: %s: %d free user context%s (nfreectxts); %d queue%s need %d", device.ErrBusy, u.Name, free, plural(free), n, plural(n), n)
	}
	return n, nil
}

func rcvContexts(n int) string { return fmt.Sprintf("%d receive context%s", n, plural(n)) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Unit reads unit name's port and peers file (peers; "" means
// PeersDir/name.peers) and checks that it can be opened: a node in Dev
// (hfidev.ErrNoDevice), an ACTIVE port with a LID (ErrPortNotActive), a
// readable peers file (ErrPeers) whose line for the unit, if any, lists
// no more receive contexts than the unit has user contexts (ErrPeers).
// That line gives the address it goes by and the contexts it serves;
// without one it goes by the port GID and serves one context.
func (h Host) Unit(name, peers string) (Unit, error) {
	u := Unit{Name: name}
	if _, ok := UnitNumber(name); !ok {
		return u, fmt.Errorf("%w: %q is not a unit name (hfi1_N)", hfidev.ErrNoDevice, name)
	}
	if _, err := fs.Stat(h.Dev, name); err != nil {
		return u, fmt.Errorf("%w: %s/%s: %w", hfidev.ErrNoDevice, h.DevDir, name, err)
	}
	var err error
	if u.Port, err = h.Port(name); err != nil {
		return u, err
	}
	if u.Port.State != "ACTIVE" || u.Port.LID == 0 {
		return u, fmt.Errorf("%w: %s port 1 is %q, LID %d", ErrPortNotActive, name, u.Port.State, u.Port.LID)
	}
	if peers == "" {
		peers = h.PeersDir + "/" + name + ".peers"
	}
	all, err := Peers(peers)
	if err != nil {
		return u, err
	}
	u.Self = hfilink.Node{LID: u.Port.LID, GID: u.Port.GID}
	for _, p := range all {
		if p.LID == u.Port.LID {
			u.Self.GID, u.Self.Ctxts = p.GID, p.Ctxts
		} else {
			u.Peers = append(u.Peers, p)
		}
	}
	if u.Contexts, _, err = h.Contexts(name); err != nil {
		return u, err
	}
	if u.Contexts >= 0 && len(u.Self.Ctxts) > u.Contexts {
		return u, fmt.Errorf("%w: %s: line for LID %d lists %s; the unit has %d user context%s (nctxts)",
			ErrPeers, name, u.Port.LID, rcvContexts(len(u.Self.Ctxts)), u.Contexts, plural(u.Contexts))
	}
	return u, nil
}

// Open opens unit name ("hfi1_N") as a device: Unit.Queues contexts on
// the unit's node (o.Queues, if not 0, must be that many: CheckQueues),
// through h.Sys, a link and a worker on each, its addresses from Unit
// (o.Peers is the peers file). The driver must assign the contexts the
// unit's peers-file line lists, in order (ErrPeers otherwise: another
// process holds one). It never falls back to a model.
func (h Host) Open(name string, o device.OpenOptions) (*device.Device, error) {
	u, err := h.Unit(name, o.Peers)
	if err != nil {
		return nil, err
	}
	queues := u.Queues()
	if o.Queues > 0 {
		if err := u.CheckQueues(o.Queues); err != nil {
			return nil, err
		}
	}
	n, _ := UnitNumber(name)
	var links []*hfilink.Link
	closeLinks := func() {
		for _, l := range links {
			_ = l.Close()
		}
	}
	fail := func(err error) (*device.Device, error) {
		closeLinks()
		return nil, fmt.Errorf("hfidevice: %s: %w", name, err)
	}
	for i := range queues {
		c, err := hfidev.OpenUnitIn(h.Sys(h.DevDir+"/"+name), h.Dev, h.DevDir, n, hfidev.Options{})
		if errors.Is(err, unix.EBUSY) { // every user context assigned
			return fail(fmt.Errorf("%w: %w", device.ErrBusy, err))
		}
		if err != nil {
			return fail(err)
		}
		// Peers send worker i's queue pairs to the line's i-th context.
		if len(u.Self.Ctxts) > 0 && c.Info.Ctxt != u.Self.Ctxts[i] {
			_ = c.Close()
			closeLinks()
			return nil, fmt.Errorf("%w: %s: the driver assigned receive context %d to worker %d; the line for LID %d lists %d (another process holds it, or the line is wrong)",
				ErrPeers, name, c.Info.Ctxt, i, u.Port.LID, u.Self.Ctxts[i])
		}
		l, err := hfilink.New(c, hfilink.Config{Self: u.Self, Peers: u.Peers})
		if err != nil {
			return fail(errors.Join(err, c.Close()))
		}
		links = append(links, l)
	}
	return New(links, Options{Name: name, Self: u.Self, Peers: u.Peers, CPUs: o.CPUs})
}

// Usable lists the units whose nodes are in Dev and that Unit accepts
// with their default peers files; the error joins why each other one was
// left out (nil when none was).
func (h Host) Usable() ([]Unit, error) {
	units, err := hfidev.UnitsIn(h.Dev, h.DevDir)
	if err != nil {
		return nil, err
	}
	var out []Unit
	var errs []error
	for _, n := range units {
		u, err := h.Unit(fmt.Sprintf("hfi1_%d", n.N), "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, u)
	}
	return out, errors.Join(errs...)
}
