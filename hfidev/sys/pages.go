package sys

import "golang.org/x/sys/unix"

// AllocPages maps n bytes (rounded up to whole pages) of anonymous,
// page-aligned memory outside the Go heap: memory for TID_UPDATE, which
// needs a page-aligned buffer whose pages the driver (or the model) may
// pin and the chip may write while Go code holds only a slice of it.
// Its capacity is the whole mapping; free it with FreePages once every
// TID over it is freed.
func AllocPages(n int) ([]byte, error) {
	if n <= 0 {
		return nil, unix.EINVAL
	}
	b, err := unix.Mmap(-1, 0, (n+pageSize-1)&^(pageSize-1), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

// FreePages unmaps memory AllocPages returned.
func FreePages(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	return unix.Munmap(b[:cap(b)])
}

const pageSize = 4096
