package ctrl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RunDirEnv names the environment variable that, when set, replaces
// /run/softfabric as the base of RunDir (for tests).
const RunDirEnv = "SOFTFABRIC_RUN_DIR"

const (
	defaultRunBase = "/run/softfabric"
	stateFile      = "state.json"
)

// ErrEphemeralBPFFS is returned by EnsureBPFFS when the only bpffs it could
// mount would die with the calling process's private mount namespace.
var ErrEphemeralBPFFS = errors.New("no persistent bpffs")

func runBase() string {
	if b := os.Getenv(RunDirEnv); b != "" {
		return filepath.Clean(b)
	}
	return defaultRunBase
}

// RunDir is the directory of a device's state and lock files:
// /run/softfabric/<netns>/<iface>. The namespace inode keeps two
// namespaces' eth0 apart. iface is a kernel interface name (no "/").
func RunDir(netns uint64, iface string) string {
	return filepath.Join(runBase(), strconv.FormatUint(netns, 10), iface)
}

// BPFRoot is where softfabric's bpffs is mounted: /run/softfabric/bpf.
//
// Not /sys/fs/bpf: `ip netns exec` gives each command a private mount
// namespace with a fresh sysfs on /sys, which hides the host's
// /sys/fs/bpf; a bpffs mounted there by `softfabric up` would die with it,
// taking the pinned XDP link (and so the classifier) along. /run is not
// remounted, so a bpffs on /run/softfabric/bpf mounted from the host's
// mount namespace is the same one in every `ip netns exec`.
func BPFRoot() string { return filepath.Join(runBase(), "bpf") }

// BPFDir is the directory of a device's pinned maps and links:
// /run/softfabric/bpf/<netns>/<iface>.
func BPFDir(netns uint64, iface string) string {
	return filepath.Join(BPFRoot(), strconv.FormatUint(netns, 10), iface)
}

// EnsureBPFFS makes sure BPFRoot is a bpffs, mounting one there when it is
// not. It refuses (ErrEphemeralBPFFS) to mount from a private mount
// namespace (`ip netns exec`), where the mount, and every pin in it, would
// vanish when the process exits: that must be done once from the host.
// It is idempotent.
func EnsureBPFFS() error {
	root := BPFRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", root, err)
	}
	if isBPFFS(root) {
		return nil
	}
	if private, _ := privateMountNS(); private {
		return fmt.Errorf("%w: %s is not mounted and a mount made from this private mount namespace (ip netns exec) would vanish with it; mount it once from the host: mount -t bpf bpf %s", ErrEphemeralBPFFS, root, root)
	}
	if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting bpffs on %s: %w", root, err)
	}
	return nil
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// privateMountNS reports whether this process has a mount namespace of its
// own, different from its parent's: what `ip netns exec` (or unshare -m)
// sets up. When that cannot be told it reports false.
func privateMountNS() (bool, error) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false, err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return false, err
	}
	return self != parent, nil
}

// State is what `softfabric up` records about a device it owns, for
// status and down.
type State struct {
	Iface   string `json:"iface"`
	Ifindex int    `json:"ifindex"`
	NetNS   uint64 `json:"netns"`
	MAC     string `json:"mac"`
	MTU     int    `json:"mtu"`
	// Queues is how many queues the device used at up (Device.Queues).
	// A process that opens it later serves the queues it uses then.
	Queues int `json:"queues"`
	// QueueLimit is the most queues to serve (up --queues); 0 for all.
	QueueLimit int       `json:"queue_limit,omitempty"`
	XDPMode    string    `json:"xdp_mode"`
	Frags      bool      `json:"frags"`
	PinDir     string    `json:"pin_dir"`
	ProgID     uint32    `json:"prog_id"`
	Since      time.Time `json:"since"`
	Version    string    `json:"version"`
}

// ErrStale is returned by State.Current for a record that does not
// describe the interface as it is now.
var ErrStale = errors.New("stale softfabric state")

// Current checks that s still describes dev: same interface (index and
// MAC) and the classifier it attached still attached. A namespace's inode
// number can be reused after the namespace is gone, so a record under
// /run/softfabric/<netns> may belong to a namespace that no longer exists;
// and a program can be detached behind softfabric's back.
func (s *State) Current(dev *Device) error {
	switch {
	case s.Ifindex != dev.Index || s.MAC != dev.MAC.String():
		return fmt.Errorf("%w: recorded for another interface (ifindex %d, %s)", ErrStale, s.Ifindex, s.MAC)
	case dev.XDPProgID == 0:
		return fmt.Errorf("%w: the classifier is no longer attached", ErrStale)
	case s.ProgID != 0 && s.ProgID != dev.XDPProgID:
		return fmt.Errorf("%w: another XDP program (id %d) replaced the classifier (id %d)", ErrStale, dev.XDPProgID, s.ProgID)
	}
	return nil
}

// reattachGrace is how long Settled waits for a missing classifier to
// come back.
const reattachGrace = 500 * time.Millisecond

// Settled is Current for a reader that acts on the answer (status, up,
// down, an application opening the device): while the classifier is
// missing it looks dev up again for up to half a second, because the
// daemon serving a veth detaches the classifier and attaches it again
// when the veth's channels grow (device.Queues.Grow), and for that moment
// the interface has no program. It returns the device as last looked up.
func (s *State) Settled(dev *Device) (*Device, error) {
	err := s.Current(dev)
	for deadline := time.Now().Add(reattachGrace); err != nil && dev.XDPProgID == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		d, lerr := LookupDevice(dev.Name)
		if lerr != nil {
			break
		}
		dev, err = d, s.Current(d)
	}
	return dev, err
}

// SaveState writes s to dir/state.json atomically (a temporary file renamed
// over it), mode 0600, creating dir (0700) as needed.
func SaveState(dir string, s *State) error {
	if err := saveJSON(dir, stateFile, s); err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}

// saveJSON writes v as indented JSON to dir/name atomically (a temporary
// file renamed over it), mode 0600, creating dir (0700) as needed.
func saveJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".*") // mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// LoadState reads dir/state.json. When there is none, the device is not
// up and the error matches fs.ErrNotExist.
func LoadState(dir string) (*State, error) {
	path := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("not up (no %s): %w", path, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("reading state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading state %s: %w", path, err)
	}
	return &s, nil
}

// RemoveState removes dir with everything in it, then its parents up to the
// run base while they are empty. dir must lie under the run base (see
// RunDir); a missing dir is not an error.
func RemoveState(dir string) error {
	base := runBase()
	dir = filepath.Clean(dir)
	rel, err := filepath.Rel(base, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("removing state: %s is not under %s", dir, base)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing state: %w", err)
	}
	for d := filepath.Dir(dir); d != base && strings.HasPrefix(d, base+"/"); d = filepath.Dir(d) {
		if err := os.Remove(d); err != nil {
			break // not empty (another device's state), or gone
		}
	}
	return nil
}
