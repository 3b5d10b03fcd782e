// Package sfbin builds a command of this module as a static binary, for
// tests that run it the way users do (the softfabric CLI in namespaces).
package sfbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build builds the package at pkg (a path relative to the test's
// directory, e.g. "../cmd/softfabric") with CGO_ENABLED=0 into a new
// temporary directory and returns the binary's path; cleanup removes the
// directory.
func Build(pkg string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "softfabric-bin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building %s: %v\n%s", pkg, err, out)
	}
	return bin, cleanup, nil
}
