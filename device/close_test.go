package device

import (
	"testing"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/memlink"
)

// TestCloseTwice: closing a device again does nothing: its closers (file
// descriptors, mappings) run once.
func TestCloseTwice(t *testing.T) {
	x, _ := memlink.NewPair(memlink.Config{})
	d := NewWorkers([]link.Link{x}, Options{Name: "x", MTU: 1500})
	n := 0
	d.OnClose(func() error { n++; return nil })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil || n != 1 {
		t.Fatalf("second Close: %v, closers ran %d times", err, n)
	}
}
