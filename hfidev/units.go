package hfidev

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/softfabric/softfabric/hfidev/sys"
)

// DevDir is where the driver's nodes live.
const DevDir = "/dev"

// Unit is an HFI the host has.
type Unit struct {
	N    int    // the N of hfi1_N
	Path string // /dev/hfi1_N
}

// Units lists the hfi1 character devices present, in unit order. An empty
// list with a nil error means the host has none.
func Units() ([]Unit, error) {
	return listUnits(os.DirFS(DevDir), DevDir, true)
}

// UnitsIn is Units over another directory's listing (fsys, named dir in
// the paths it returns): a test's fake /dev, or a container's.
func UnitsIn(fsys fs.FS, dir string) ([]Unit, error) { return listUnits(fsys, dir, true) }

// listUnits finds hfi1_<N> entries in fsys; with charDev, only character
// devices count (the real driver's nodes).
func listUnits(fsys fs.FS, dir string, charDev bool) ([]Unit, error) {
	ents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("hfidev: listing %s: %w", dir, err)
	}
	var units []Unit
	for _, e := range ents {
		n, ok := unitNumber(e.Name())
		if !ok {
			continue
		}
		if charDev {
			info, err := e.Info()
			if err != nil || info.Mode()&fs.ModeCharDevice == 0 {
				continue
			}
		}
		units = append(units, Unit{N: n, Path: dir + "/" + e.Name()})
	}
	slices.SortFunc(units, func(a, b Unit) int { return cmp.Compare(a.N, b.N) })
	return units, nil
}

// unitNumber parses "hfi1_N"; "hfi1_diagpkt" and the like are not units.
func unitNumber(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "hfi1_")
	if !ok || s == "" {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// UnitPath is the device node of unit n.
func UnitPath(n int) string { return fmt.Sprintf("%s/hfi1_%d", DevDir, n) }

// OpenUnit assigns a context on real unit n through sys.Unix. It fails
// with ErrNoDevice when the node does not exist; it never falls back to a
// model.
func OpenUnit(n int, opt Options) (*Context, error) {
	return OpenUnitIn(sys.Unix{}, os.DirFS(DevDir), DevDir, n, opt)
}

// OpenUnitIn is OpenUnit with the node looked up in fsys (named dir in
// paths) and opened through s: a test's fake /dev whose nodes s serves.
// The node must be a character device (ErrNoDevice otherwise).
func OpenUnitIn(s sys.Sys, fsys fs.FS, dir string, n int, opt Options) (*Context, error) {
	name := fmt.Sprintf("hfi1_%d", n)
	path := dir + "/" + name
	st, err := fs.Stat(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, path, err)
	}
	if st.Mode()&fs.ModeCharDevice == 0 {
		return nil, fmt.Errorf("%w: %s is not a character device", ErrNoDevice, path)
	}
	return OpenContext(s, path, opt)
}
