// Package memfdtest makes memfds for tests of memory shared with the
// daemon: sealed as the daemon wants them, or not.
package memfdtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// New returns a memfd named name of size bytes with seals added (0:
// none; -1: a memfd that does not allow sealing), closed when the test
// ends.
func New(t testing.TB, name string, size int, seals int) int {
	t.Helper()
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	if seals < 0 {
		flags = unix.MFD_CLOEXEC
	}
	fd, err := unix.MemfdCreate(name, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seals > 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// Others returns descriptors that are not memfds, for the daemon to
// refuse: a regular file of size bytes and a pipe's read end, closed when
// the test ends.
func Others(t testing.TB, size int) (file, pipe int) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "mem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return int(f.Fd()), p[0]
}
