package ctrl

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary re-executes itself as a helper process: with helperEnv
// set, TestMain runs the named helper instead of the tests.
const (
	helperEnv    = "SOFTFABRIC_CTRL_TEST_HELPER"
	helperDirEnv = "SOFTFABRIC_CTRL_TEST_DIR"
	// helperIfaceEnv names the interface of the "queues" helper.
	helperIfaceEnv = "SOFTFABRIC_CTRL_TEST_IFACE"
)

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h))
	}
	os.Exit(m.Run())
}

func runHelper(name string) int {
	switch name {
	case "lock":
		// Take the lock, say so, and hold it until stdin closes or we
		// are killed; exit without Unlock, as a crashed owner would.
		if _, err := LockDevice(os.Getenv(helperDirEnv)); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("locked")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "bpffs":
		before := fsMagic(BPFRoot())
		for range 2 {
			if err := EnsureBPFFS(); err != nil {
				fmt.Println("error:", err)
				return 1
			}
		}
		fmt.Printf("before=%#x after=%#x mounts=%d\n", before, fsMagic(BPFRoot()), bpfMounts(BPFRoot()))
		return 0
	case "queues":
		// LookupDevice's queue facts, from a process started by ip netns
		// exec, which mounts the namespace's own sysfs.
		d, err := LookupDevice(os.Getenv(helperIfaceEnv))
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Printf("queues=%d source=%s max=%d/%d channels=%v\n", d.Queues, d.QueueSource, d.MaxRxQueues, d.MaxTxQueues, d.Channels)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	return 2
}

func fsMagic(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return -1
	}
	return st.Type
}

// bpfMounts counts the bpf mounts on path in our mount namespace.
func bpfMounts(path string) int {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source
		fields := strings.Fields(s.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && len(fields) > 4 &&
				fields[4] == path && fields[i+1] == "bpf" {
				n++
			}
		}
	}
	return n
}
