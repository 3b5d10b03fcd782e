package hfidev

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
)

func TestListUnits(t *testing.T) {
	fsys := fstest.MapFS{
		"hfi1_10":      {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_2":       {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_diagpkt": {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_":        {Mode: os.ModeDevice | os.ModeCharDevice},
		"hfi1_3":       {Data: []byte("a regular file")},
		"null":         {Mode: os.ModeDevice | os.ModeCharDevice},
	}
	got, err := listUnits(fsys, "/dev", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Unit{2, "/dev/hfi1_2"}) || got[1] != (Unit{10, "/dev/hfi1_10"}) {
		t.Errorf("units %+v", got)
	}
	if UnitPath(3) != "/dev/hfi1_3" {
		t.Error(UnitPath(3))
	}
}

// The real path: used only when a node exists. On a host without an HFI
// this checks that nothing is found and nothing is faked.
func TestRealUnits(t *testing.T) {
	units, err := Units()
	if err != nil {
		t.Fatal(err)
	}
	if len(units) == 0 {
		matches, _ := filepath.Glob("/dev/hfi1_[0-9]*")
		if len(matches) != 0 {
			t.Fatalf("nodes %v exist but Units found none", matches)
		}
		if _, err := OpenUnit(0, Options{}); !errors.Is(err, ErrNoDevice) {
			t.Errorf("OpenUnit without a device: %v", err)
		}
		// No HFI here (nor on CI's machines): what can be checked is
		// that nothing is found and nothing is faked.
		t.Log("no /dev/hfi1_*: the hardware path is not exercised on this host")
		return
	}
	c, err := OpenUnit(units[0].N, Options{})
	if err != nil {
		t.Fatalf("real %s: %v", units[0].Path, err)
	}
	t.Logf("%s: chip %v, ctxt %d, send ctxt %d, %d credits", units[0].Path, c.Chip, c.Info.Ctxt, c.Info.SendCtxt, c.Info.Credits)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// OpenUnitIn refuses a missing node and one that is not a character
// device before any system call (the success path, over the model, is
// hfidevice's TestOpenByName).
func TestOpenUnitInNoDevice(t *testing.T) {
	fsys := fstest.MapFS{"hfi1_1": {Data: []byte("a regular file")}}
	for _, n := range []int{0, 1} {
		if _, err := OpenUnitIn(nil, fsys, "/fake", n, Options{}); !errors.Is(err, ErrNoDevice) {
			t.Errorf("unit %d: %v", n, err)
		}
	}
}
