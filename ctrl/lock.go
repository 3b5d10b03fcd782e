package ctrl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrBusy is matched by LockDevice's error when another process owns the
// device.
var ErrBusy = errors.New("device busy")

// BusyError is LockDevice's error when another process holds the lock.
type BusyError struct {
	PID int // the holder, as it wrote itself into the lock file; 0 if unknown
}

func (e *BusyError) Error() string {
	if e.PID == 0 {
		return "device busy"
	}
	return fmt.Sprintf("device busy (pid %d)", e.PID)
}

func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Lock is the exclusive ownership of a device's queues by this process.
type Lock struct {
	f *os.File
}

const lockFile = "owner.lock"

// LockDevice takes dir/owner.lock with flock(LOCK_EX|LOCK_NB) and writes
// our pid into it. The kernel drops a flock when its holder exits, so a
// file left by a dead process is simply taken over; the pid is only there
// to name the holder in the BusyError. A second LockDevice in the same
// process is busy too.
func LockDevice(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("locking device: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("locking device: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
				return nil, &BusyError{PID: pid}
			}
			return nil, fmt.Errorf("locking device: %w", err)
		}
		// The holder we waited on may have removed the file (RemoveState)
		// before unlocking: then we hold a lock on an unlinked inode that
		// the next LockDevice would not see. Retry on the current file.
		var fst, pst unix.Stat_t
		if unix.Fstat(int(f.Fd()), &fst) != nil || unix.Stat(path, &pst) != nil ||
			fst.Ino != pst.Ino || fst.Dev != pst.Dev {
			f.Close()
			continue
		}
		err = f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking device: %w", err)
		}
		return &Lock{f: f}, nil
	}
}

// Unlock gives the device up. It is safe to call more than once.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0) // no stale pid for the next reader
	err := unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unlocking device: %w", err)
	}
	return nil
}
