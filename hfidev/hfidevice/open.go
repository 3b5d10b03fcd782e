package hfidevice

import (
	"bufio"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"net/netip"
	"os"
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
		node.Ctxts = append(node.Ctxts, uint16(n))
	}
	return node, nil
}

// Unit is a unit as opening it by name would see it: its port, its own
// node (LID and the address it goes by) and its peers.
type Unit struct {
	Name  string
	Port  Port
	Self  hfilink.Node
	Peers []hfilink.Node
}

// Unit reads unit name's port and peers file (peers; "" means
// PeersDir/name.peers) and checks that it can be opened: a node in Dev
// (hfidev.ErrNoDevice), an ACTIVE port with a LID (ErrPortNotActive), a
// readable peers file (ErrPeers). The peers file's line with the unit's
// own LID gives the address it goes by; without one it is the port GID.
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
			u.Self.GID = p.GID
		} else {
			u.Peers = append(u.Peers, p)
		}
	}
	return u, nil
}

// Open opens unit name ("hfi1_N") as a device: o.Queues contexts (0: one)
// on the unit's node, through h.Sys, a link and a worker on each, its
// addresses from Unit (o.Peers is the peers file). It never falls back
// to a model.
func (h Host) Open(name string, o device.OpenOptions) (*device.Device, error) {
	u, err := h.Unit(name, o.Peers)
	if err != nil {
		return nil, err
	}
	n, _ := UnitNumber(name)
	var links []*hfilink.Link
	fail := func(err error) (*device.Device, error) {
		for _, l := range links {
			_ = l.Close()
		}
		return nil, fmt.Errorf("hfidevice: %s: %w", name, err)
	}
	for range max(o.Queues, 1) {
		c, err := hfidev.OpenUnitIn(h.Sys(h.DevDir+"/"+name), h.Dev, h.DevDir, n, hfidev.Options{})
		if errors.Is(err, unix.EBUSY) { // every user context assigned
			return fail(fmt.Errorf("%w: %w", device.ErrBusy, err))
		}
		if err != nil {
			return fail(err)
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
