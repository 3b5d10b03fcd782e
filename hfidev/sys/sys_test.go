//go:build linux

package sys

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

func TestMemRegion(t *testing.T) {
	buf := make([]uint64, 16)
	b := unsafeBytes(buf)
	r, err := NewMemRegion(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Store64(8, 0x0102030405060708)
	if b[8] != 8 || b[15] != 1 || r.Load64(8) != 0x0102030405060708 {
		t.Errorf("not little-endian in place: % x", b[8:16])
	}
	blk := [8]uint64{1, 2, 3, 4, 5, 6, 7, 8}
	r.StoreBlock(64, &blk)
	for i := range 8 {
		if buf[8+i] != uint64(i+1) {
			t.Fatalf("block word %d = %d", i, buf[8+i])
		}
	}
	if _, err := NewMemRegion(b[1:]); !errors.Is(err, ErrMisaligned) {
		t.Errorf("misaligned accepted: %v", err)
	}
	mustPanic(t, "misaligned offset", func() { r.Load64(4) })
	mustPanic(t, "out of range", func() { r.Load64(len(b)) })
	mustPanic(t, "block past end", func() { r.StoreBlock(len(b)-32, &blk) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

// The real seam against ordinary files: these are real system calls, with
// no hfi1 device involved.
func TestUnixOnFiles(t *testing.T) {
	var s Unix
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := s.Open(path, unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(fd)

	// A short argument never reaches the kernel.
	if err := s.Ioctl(fd, abi.IoctlCtxtInfo, make([]byte, abi.CtxtInfoSize-1)); !errors.Is(err, unix.EFAULT) {
		t.Errorf("short arg: %v", err)
	}
	// A regular file knows no hfi1 ioctl.
	if err := s.Ioctl(fd, abi.IoctlGetVers, make([]byte, 4)); !errors.Is(err, unix.ENOTTY) {
		t.Errorf("GET_VERS on a file: %v", err)
	}

	r, err := s.Mmap(fd, 4096, 4096, abi.ProtRead|abi.ProtWrite, abi.MapShared)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(*ioRegion); !ok {
		t.Errorf("writable mapping is a %T, want plain-store ioRegion", r)
	}
	r.Store64(0, 0xfeedface)
	blk := [8]uint64{1, 2, 3, 4, 5, 6, 7, 8}
	r.StoreBlock(64, &blk)
	if r.Load64(0) != 0xfeedface || r.Load64(64+56) != 8 {
		t.Error("stores not visible through the mapping")
	}
	mustPanic(t, "block past end", func() { r.StoreBlock(4096-32, &blk) })
	if err := s.Munmap(r); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if got[4096] != 0xce || got[4099] != 0xfe || got[4096+64+56] != 8 {
		t.Errorf("stores did not reach the file: % x", got[4096:4104])
	}
	ro, err := s.Mmap(fd, 0, 4096, abi.ProtRead, abi.MapShared)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ro.(*MemRegion); !ok || ro.Load64(0) != 0 {
		t.Errorf("read-only mapping is a %T", ro)
	}
	if err := s.Munmap(ro); err != nil {
		t.Fatal(err)
	}
	if err := s.Munmap(ro); err == nil {
		t.Error("double munmap succeeded")
	}

	n, err := s.Writev(fd, [][]byte{[]byte("ab"), nil, []byte("cde")})
	if err != nil || n != 5 {
		t.Errorf("writev: %d, %v", n, err)
	}
}

func TestUnixWritevNoAlloc(t *testing.T) {
	var s Unix
	fd, err := s.Open(os.DevNull, unix.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(fd)
	hdr := make([]byte, 72)
	data := make([]byte, 4096)
	iov := [][]byte{hdr, data, data, data}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := s.Writev(fd, iov); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Writev allocates %.1f times per call", allocs)
	}
}
