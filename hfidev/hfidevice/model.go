package hfidevice

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"

	"github.com/softfabric/softfabric/dataplane/engine"
	"github.com/softfabric/softfabric/device"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/hfilink"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// PairConfig describes two modeled units back to back.
type PairConfig struct {
	Chip abi.Chip
	// Contexts is the number of contexts (and workers) per unit; 0 means 1.
	Contexts int
	// Model, if set, adjusts each unit's configuration (after LID and
	// unit number are set).
	Model func(*model.Config)
	// Link tunes the links (MTU, SDMAMin, TxBufs); Self and Peers are
	// filled in.
	Link hfilink.Config
	// GIDs are the units' GIDs; zero values mean DefaultGIDs.
	GIDs [2]netip.Addr
	// Pace is the devices' idle back-off (NewModelPair).
	Pace engine.Backoff
}

// DefaultGIDs are a pair's GIDs when PairConfig gives none: loopback
// addresses, so that an out-of-band TCP exchange between 127.0.0.1 and
// 127.0.0.2 in one process finds each side's GID as its local address.
var DefaultGIDs = [2]netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("::ffff:127.0.0.2")}

// ModelLinks is two modeled units joined by a wire and the links over
// their contexts. Unit i has LID i+1.
type ModelLinks struct {
	Units [2]*model.Unit
	Wire  *model.Wire
	Nodes [2]hfilink.Node
	Links [2][]*hfilink.Link
}

// NewModelLinks makes the units, connects them and opens cfg.Contexts
// contexts on each, with a link over every context.
func NewModelLinks(cfg PairConfig) (*ModelLinks, error) {
	if cfg.Contexts == 0 {
		cfg.Contexts = 1
	}
	for i, g := range cfg.GIDs {
		if !g.IsValid() {
			cfg.GIDs[i] = DefaultGIDs[i]
		}
	}
	m := &ModelLinks{}
	var ctxts [2][]*hfidev.Context
	fail := func(err error) (*ModelLinks, error) {
		for _, cs := range ctxts {
			for _, c := range cs {
				_ = c.Close()
			}
		}
		return nil, err
	}
	for i := range m.Units {
		mc := model.DefaultConfig(cfg.Chip)
		mc.Unit, mc.LID = i, uint16(i+1)
		if cfg.Model != nil {
			cfg.Model(&mc)
		}
		u, err := model.NewUnit(mc)
		if err != nil {
			return nil, err
		}
		m.Units[i] = u
		m.Nodes[i] = hfilink.Node{LID: mc.LID, GID: cfg.GIDs[i]}
		for range cfg.Contexts {
			c, err := hfidev.OpenContext(u, u.Path(), hfidev.Options{})
			if err != nil {
				return fail(fmt.Errorf("hfidevice: %s: %w", u.Path(), err))
			}
			ctxts[i] = append(ctxts[i], c)
			m.Nodes[i].Ctxts = append(m.Nodes[i].Ctxts, c.Info.Ctxt)
		}
	}
	m.Wire = model.Connect(m.Units[0], m.Units[1])
	for i := range m.Units {
		lc := cfg.Link
		lc.Self, lc.Peers = m.Nodes[i], []hfilink.Node{m.Nodes[1-i]}
		for _, c := range ctxts[i] {
			l, err := hfilink.New(c, lc)
			if err != nil {
				return fail(err)
			}
			m.Links[i] = append(m.Links[i], l)
		}
	}
	return m, nil
}

// Close closes the links and their contexts.
func (m *ModelLinks) Close() error {
	var errs []error
	for _, ls := range m.Links {
		for _, l := range ls {
			errs = append(errs, l.Close())
		}
	}
	return errors.Join(errs...)
}

// LinkStats sums the counters of unit i's links.
func (m *ModelLinks) LinkStats(i int) hfilink.Stats {
	var t hfilink.Stats
	for _, l := range m.Links[i] {
		t.Add(l.Stats())
	}
	return t
}

// Pair is two devices on two modeled units joined by a wire.
type Pair struct {
	*ModelLinks
	Devs [2]*device.Device
}

// NewModelPair makes NewModelLinks' units and links and a device on each
// unit's links, named after the unit ("model:hfi1_N").
func NewModelPair(cfg PairConfig) (*Pair, error) {
	m, err := NewModelLinks(cfg)
	if err != nil {
		return nil, err
	}
	p := &Pair{ModelLinks: m}
	for i, u := range m.Units {
		// New cannot fail on a pair's links: there is one at least.
		p.Devs[i], err = New(m.Links[i], Options{Name: u.Path(), Self: m.Nodes[i], Peers: []hfilink.Node{m.Nodes[1-i]}, Pace: cfg.Pace})
		if err != nil {
			return nil, errors.Join(err, m.Close())
		}
	}
	return p, nil
}

// Close closes both devices, their links and contexts.
func (p *Pair) Close() error {
	return errors.Join(p.Devs[0].Close(), p.Devs[1].Close())
}

// ModelHost is a host as opening units by name sees it, with two modeled
// units back to back in the place of real ones: hfi1_0 (LID 1) and
// hfi1_1 (LID 2) as character devices in a fake /dev, served by the
// units through the sys seam; a fake sysfs saying their ports are ACTIVE
// (GIDs fe80::11:7501:101:N) and how many user contexts each has and has
// free (nctxts, nfreectxts: the model's count when read); and a peers
// file for each in PeersDir giving them the addresses DefaultGIDs and
// their first receive contexts (PeerLine(i, 1)). For tests: nothing here
// is hardware.
type ModelHost struct {
	Host
	Units [2]*model.Unit
	Wire  *model.Wire
	// SysfsFiles are Host.Sysfs's files (nfreectxts aside), for tests to
	// change (a port's state).
	SysfsFiles fstest.MapFS
	// Peers are the lines NewModelHost wrote to both peers files.
	Peers []string
}

// NewModelHost makes the units, their wire and files; the peers files
// go in peersDir.
func NewModelHost(chip abi.Chip, peersDir string) (*ModelHost, error) {
	dev, sysfs := fstest.MapFS{}, fstest.MapFS{}
	nodes := map[string]sys.Sys{}
	units := map[string]*model.Unit{}
	m := &ModelHost{SysfsFiles: sysfs}
	for i := range m.Units {
		cfg := model.DefaultConfig(chip)
		cfg.Unit, cfg.LID = i, uint16(i+1)
		u, err := model.NewUnit(cfg)
		if err != nil {
			return nil, err
		}
		m.Units[i] = u
		name := fmt.Sprintf("hfi1_%d", i)
		dev[name] = &fstest.MapFile{Mode: fs.ModeCharDevice | 0o666}
		nodes["/dev/"+name] = modelNode{Unit: u, path: "/dev/" + name}
		units[name] = u
		sysfs[name+"/nctxts"] = &fstest.MapFile{Data: fmt.Appendf(nil, "%d\n", cfg.UserContexts)}
		port := name + "/ports/1/"
		sysfs[port+"lid"] = &fstest.MapFile{Data: fmt.Appendf(nil, "0x%x\n", cfg.LID)}
		sysfs[port+"state"] = &fstest.MapFile{Data: []byte("4: ACTIVE\n")}
		sysfs[port+"gids/0"] = &fstest.MapFile{Data: fmt.Appendf(nil, "fe80:0000:0000:0000:0011:7501:0101:%04x\n", i+1)}
	}
	for i := range m.Units {
		m.Peers = append(m.Peers, m.PeerLine(i, 1))
	}
	m.Wire = model.Connect(m.Units[0], m.Units[1])
	m.Host = Host{Dev: dev, DevDir: "/dev", Sysfs: modelSysfs{files: sysfs, units: units}, PeersDir: peersDir,
		Sys: func(path string) sys.Sys { return nodes[path] }}
	for i := range m.Units {
		if err := m.WritePeers(i, m.Peers); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PeerLine is unit i's peers-file line listing its first n user
// contexts, the ones a process opening n contexts on an idle unit is
// assigned: "127.0.0.1 1 3,4 # hfi1_0" for unit 0 and n = 2.
func (m *ModelHost) PeerLine(i, n int) string {
	cfg := m.Units[i].Config()
	ctxts := make([]string, n)
	for j := range ctxts {
		ctxts[j] = fmt.Sprint(cfg.FirstUserCtxt + j)
	}
	return fmt.Sprintf("%v %d %s # hfi1_%d", DefaultGIDs[i].Unmap(), cfg.LID, strings.Join(ctxts, ","), i)
}

// WritePeers writes lines as unit i's peers file.
func (m *ModelHost) WritePeers(i int, lines []string) error {
	text := "# ADDR LID CTXT[,CTXT...]\n\n" + strings.Join(lines, "\n") + "\n"
	return os.WriteFile(filepath.Join(m.PeersDir, fmt.Sprintf("hfi1_%d.peers", i)), []byte(text), 0o644)
}

// modelSysfs is ModelHost's sysfs: its SysfsFiles, and each unit's
// nfreectxts, the model's count when the file is opened (as the driver
// computes it when read).
type modelSysfs struct {
	files fstest.MapFS
	units map[string]*model.Unit
}

func (s modelSysfs) Open(name string) (fs.File, error) {
	if unit, ok := strings.CutSuffix(name, "/nfreectxts"); ok && s.units[unit] != nil {
		free := fmt.Appendf(nil, "%d\n", s.units[unit].FreeContexts())
		return fstest.MapFS{name: {Data: free, Mode: 0o444}}.Open(name)
	}
	return s.files.Open(name)
}

// modelNode is a modeled unit answering for a /dev node path, as the
// driver's node would.
type modelNode struct {
	*model.Unit
	path string
}

func (n modelNode) Open(path string, flags int) (int, error) {
	if path != n.path {
		return -1, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return n.Unit.Open(n.Unit.Path(), flags)
}
