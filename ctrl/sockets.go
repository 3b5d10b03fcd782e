package ctrl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const socketsFile = "sockets.json"

// Sockets is what the process that opened a device (the owner) publishes
// about its AF_XDP sockets, for `softfabric status`: the kernel keeps a
// socket's zero-copy or copy mode to the socket's owner (getsockopt
// XDP_OPTIONS), and sock_diag for AF_XDP (CONFIG_XDP_SOCKETS_DIAG) is not
// built into every kernel (these machines' 6.18 has none).
type Sockets struct {
	PID    int          `json:"pid"`
	Queues []SocketInfo `json:"queues"`
}

// SocketInfo describes the socket on one queue.
type SocketInfo struct {
	Queue       int    `json:"queue"`
	Mode        string `json:"mode"` // "zero-copy" or "copy"
	RxRing      int    `json:"rx_ring"`
	TxRing      int    `json:"tx_ring"`
	FillRing    int    `json:"fill_ring"`
	CompRing    int    `json:"completion_ring"`
	Frames      int    `json:"umem_frames"`
	FrameSize   int    `json:"umem_frame_size"`
	MultiBuffer bool   `json:"multi_buffer,omitempty"`
	// InPlace: frames are built in the socket's UMEM chunks (no staging
	// copy on transmit).
	InPlace bool `json:"tx_in_place"`
}

// SaveSockets records s in dir (the device's RunDir).
func SaveSockets(dir string, s *Sockets) error {
	if err := saveJSON(dir, socketsFile, s); err != nil {
		return fmt.Errorf("saving the socket record: %w", err)
	}
	return nil
}

// LoadSockets reads the record SaveSockets wrote; with none, the error
// matches fs.ErrNotExist.
func LoadSockets(dir string) (*Sockets, error) {
	b, err := os.ReadFile(filepath.Join(dir, socketsFile))
	if err != nil {
		return nil, fmt.Errorf("reading the socket record: %w", err)
	}
	var s Sockets
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading the socket record: %w", err)
	}
	return &s, nil
}

// RemoveSockets removes the record; a missing one is not an error.
func RemoveSockets(dir string) error {
	err := os.Remove(filepath.Join(dir, socketsFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the socket record: %w", err)
	}
	return nil
}
