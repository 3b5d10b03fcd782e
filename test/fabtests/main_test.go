// Package fabtests runs fabric's functional conformance tests between two
// network namespaces over the real path: `softfabric up` on both ends of a
// veth made as users make it, the XDP classifier, AF_XDP sockets, and
// each side a process of its own using package fabric (this test binary,
// run again inside the namespace with SOFTFABRIC_FABTEST naming its role).
package fabtests

import (
	"fmt"
	"os"
	"testing"

	"github.com/softfabric/softfabric/internal/sfbin"
)

// sfBin is the softfabric command, for up and down.
var sfBin string

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role, os.Getenv(selfEnv), os.Getenv(peerEnv)); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	cleanup := func() {}
	sfBin = os.Getenv("SOFTFABRIC_BIN") // a binary built elsewhere
	if sfBin == "" {
		var err error
		if sfBin, cleanup, err = sfbin.Build("../../cmd/softfabric"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
