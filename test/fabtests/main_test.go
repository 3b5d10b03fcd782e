// Package fabtests runs fabric's functional conformance tests between two
// network namespaces over the real path: `softfabric up` on both ends of a
// veth made as users make it, the XDP classifier, AF_XDP sockets, and
// each side a process of its own using package fabric (this test binary,
// run again inside the namespace with SOFTFABRIC_FABTEST naming its role).
package fabtests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	dir, err := os.MkdirTemp("", "softfabric-fabtests")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sfBin = os.Getenv("SOFTFABRIC_BIN") // a binary built elsewhere
	if sfBin == "" {
		sfBin = filepath.Join(dir, "softfabric")
		build := exec.Command("go", "build", "-o", sfBin, "../../cmd/softfabric")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building softfabric: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
