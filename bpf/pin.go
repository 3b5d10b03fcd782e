package bpf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Names of the pins under a pin directory.
const (
	pinProg = "prog"
	pinLink = "link"
)

// pinnedMaps names the maps' pins; the names are the maps' names in
// classifier.c.
func (c *Classifier) pinnedMaps() []struct {
	name string
	m    **ebpf.Map
} {
	return []struct {
		name string
		m    **ebpf.Map
	}{
		{classifierMapXsks, &c.maps.Xsks},
		{classifierMapQpContexts, &c.maps.QpContexts},
		{classifierMapPkeys, &c.maps.Pkeys},
		{classifierMapRules, &c.maps.Rules},
		{classifierMapConfig, &c.maps.Config},
		{classifierMapCounters, &c.maps.Counters},
	}
}

func pinNames() []string {
	var c Classifier
	var names []string
	for _, p := range c.pinnedMaps() {
		names = append(names, p.name)
	}
	return append(names, pinProg, pinLink)
}

func checkBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)", dir)
	}
	return nil
}

// Pin pins every map, the program and, once attached, the XDP link under
// dir, which must be on a bpf filesystem (/sys/fs/bpf/softfabric/IFACE);
// dir is created. A pinned link keeps the program attached after the
// process exits, until Remove.
func (c *Classifier) Pin(dir string) error {
	if c.pin != "" {
		if c.pin == dir {
			return nil
		}
		return fmt.Errorf("bpf: classifier already pinned at %s", c.pin)
	}
	if c.prog == nil {
		return ErrNotLoaded
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bpf: pinning: %w", err)
	}
	if err := checkBPFFS(dir); err != nil {
		return fmt.Errorf("bpf: pinning: %w", err)
	}
	var pinned []interface{ Unpin() error }
	fail := func(what string, err error) error {
		for _, p := range pinned {
			_ = p.Unpin()
		}
		return fmt.Errorf("bpf: pinning %s: %w", what, err)
	}
	for _, p := range c.pinnedMaps() {
		if err := (*p.m).Pin(filepath.Join(dir, p.name)); err != nil {
			return fail(p.name, err)
		}
		pinned = append(pinned, *p.m)
	}
	if err := c.prog.Pin(filepath.Join(dir, pinProg)); err != nil {
		return fail(pinProg, err)
	}
	pinned = append(pinned, c.prog)
	if c.link != nil {
		if err := c.link.Pin(filepath.Join(dir, pinLink)); err != nil {
			return fail(pinLink, err)
		}
	}
	c.pin = dir
	return nil
}

// Open reopens a classifier pinned under dir by another process: its maps,
// its program, and its link when it is attached. Closing it leaves the pins
// and the attachment alone.
func Open(dir string) (*Classifier, error) {
	c := &Classifier{pin: dir}
	for _, p := range c.pinnedMaps() {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, p.name), nil)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("bpf: opening %s: %w", dir, err)
		}
		*p.m = m
	}
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProg), nil)
	switch {
	case err == nil:
		c.prog = prog
	case !errors.Is(err, fs.ErrNotExist):
		c.Close()
		return nil, fmt.Errorf("bpf: opening %s: %w", dir, err)
	}
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	switch {
	case err == nil:
		c.link = l
	case !errors.Is(err, fs.ErrNotExist):
		c.Close()
		return nil, fmt.Errorf("bpf: opening %s: %w", dir, err)
	}
	return c, nil
}

// Attached reports whether the classifier holds an XDP link, and the
// ifindex it is attached to.
func (c *Classifier) Attached() (int, bool) {
	if c.link == nil {
		return 0, false
	}
	info, err := c.link.Info()
	if err != nil || info.XDP() == nil {
		return 0, false
	}
	return int(info.XDP().Ifindex), true
}

// Remove detaches the classifier pinned under dir and removes its pins and
// dir. The program is detached even while some process still holds the
// link open. Removing what is not there is not an error.
func Remove(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	switch {
	case err == nil:
		derr := l.Detach()
		if derr != nil && !errors.Is(derr, unix.EOPNOTSUPP) && !errors.Is(derr, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("detaching: %w", derr))
		}
		errs = append(errs, l.Close())
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, err)
	}
	for _, name := range pinNames() {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bpf: removing %s: %w", dir, err)
	}
	return nil
}
