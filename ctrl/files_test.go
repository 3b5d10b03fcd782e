package ctrl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunDirAndBPFDir(t *testing.T) {
	t.Setenv(RunDirEnv, "")
	if got, want := RunDir(4026531840, "eth0"), "/run/softfabric/4026531840/eth0"; got != want {
		t.Errorf("RunDir = %s, want %s", got, want)
	}
	if got, want := BPFDir(4026531840, "eth0"), "/run/softfabric/bpf/4026531840/eth0"; got != want {
		t.Errorf("BPFDir = %s, want %s", got, want)
	}
	t.Setenv(RunDirEnv, "/tmp/x/")
	if got, want := RunDir(7, "eth1"), "/tmp/x/7/eth1"; got != want {
		t.Errorf("RunDir with %s = %s, want %s", RunDirEnv, got, want)
	}
}

func TestState(t *testing.T) {
	base := t.TempDir()
	t.Setenv(RunDirEnv, base)
	dir, other := RunDir(42, "eth0"), RunDir(42, "eth1")

	if _, err := LoadState(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadState before up: %v, want ErrNotExist", err)
	}
	s := &State{
		Iface: "eth0", Ifindex: 3, NetNS: 42, MAC: "52:54:00:12:34:56", MTU: 1500, Queues: 2, QueueLimit: 1,
		XDPMode: "native", Frags: true, PinDir: BPFDir(42, "eth0"),
		Since: time.Now().Truncate(time.Second), Version: "v0.1.0",
	}
	for range 2 { // the second save replaces the first
		if err := SaveState(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state.json mode %v, want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("state dir holds %d entries, want only state.json", len(ents))
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Since.Equal(s.Since) {
		t.Errorf("Since %v, want %v", got.Since, s.Since)
	}
	got.Since = s.Since
	if *got != *s {
		t.Errorf("LoadState = %+v, want %+v", got, s)
	}

	if err := SaveState(other, s); err != nil {
		t.Fatal(err)
	}
	if err := RemoveState(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "42")); err != nil {
		t.Fatalf("the parent of another device's state went: %v", err)
	}
	if err := RemoveState(dir); err != nil {
		t.Fatalf("second RemoveState: %v", err)
	}
	if err := RemoveState(other); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "42")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty parent left behind: %v", err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Fatalf("the run base went: %v", err)
	}
	for _, bad := range []string{base, filepath.Dir(base), "/etc", base + "/../x"} {
		if err := RemoveState(bad); err == nil {
			t.Errorf("RemoveState(%s) succeeded outside the run base", bad)
		}
	}
}

// startLockHolder runs the test binary as a helper that holds the lock on
// dir until its stdin closes.
func startLockHolder(t *testing.T, dir string) (*exec.Cmd, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=lock", helperDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b := make([]byte, 64)
	n, _ := stdout.Read(b)
	if line := strings.TrimSpace(string(b[:n])); line != "locked" {
		t.Fatalf("helper: %q", line)
	}
	return cmd, func() { stdin.Close() }
}

func TestLockDevice(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "42", "eth0")
	holder, release := startLockHolder(t, dir)
	pid := holder.Process.Pid

	_, err := LockDevice(dir)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("LockDevice while held: %v, want ErrBusy", err)
	}
	if want := fmt.Sprintf("device busy (pid %d)", pid); err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	var be *BusyError
	if !errors.As(err, &be) || be.PID != pid {
		t.Fatalf("BusyError %+v, want pid %d", be, pid)
	}

	// A holder that exits cleanly (without Unlock) releases the lock.
	release()
	if err := holder.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	l, err := LockDevice(dir)
	if err != nil {
		t.Fatalf("LockDevice after the holder exited: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "owner.lock")); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("owner.lock holds %q, want our pid %d", b, os.Getpid())
	}
	// A second lock in the same process is busy too, naming us.
	if _, err := LockDevice(dir); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Fatalf("second LockDevice in-process: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}

func TestLockDeviceTakeover(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "42", "eth0")
	holder, _ := startLockHolder(t, dir)
	// A crashed owner: SIGKILL leaves its pid in the file.
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if b, _ := os.ReadFile(filepath.Join(dir, "owner.lock")); strings.TrimSpace(string(b)) != strconv.Itoa(holder.Process.Pid) {
		t.Fatalf("owner.lock holds %q, want the dead pid %d", b, holder.Process.Pid)
	}
	l, err := LockDevice(dir)
	if err != nil {
		t.Fatalf("takeover from a dead owner: %v", err)
	}
	defer l.Unlock()
	if b, _ := os.ReadFile(filepath.Join(dir, "owner.lock")); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("owner.lock holds %q after takeover, want %d", b, os.Getpid())
	}
}

// After the owner removes the state directory and unlocks, a new owner
// locks a file that the next LockDevice sees.
func TestLockAfterRemoveState(t *testing.T) {
	t.Setenv(RunDirEnv, t.TempDir())
	dir := RunDir(42, "eth0")
	l, err := LockDevice(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := RemoveState(dir); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDevice(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Unlock()
	l.Unlock()
	if _, err := LockDevice(dir); !errors.Is(err, ErrBusy) {
		t.Fatalf("LockDevice = %v, want busy", err)
	}
}
