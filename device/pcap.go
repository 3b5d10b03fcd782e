package device

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
)

// The environment of the debugging capture (see debugCapture).
const (
	envPcap        = "SOFTFABRIC_DEBUG_PCAP"
	envPcapLimit   = "SOFTFABRIC_DEBUG_PCAP_LIMIT"
	envPcapSnapLen = "SOFTFABRIC_DEBUG_PCAP_SNAPLEN"
)

// debugCapture is a debugging aid. With SOFTFABRIC_DEBUG_PCAP set to a
// file name, it wraps l in a pcaplink.Capture writing every frame the
// process sends and receives on the device to that file (created or
// truncated): pcapng when the name ends in ".pcapng", with the direction
// as the interface (<iface>-rx, <iface>-tx); classic pcap with nanosecond
// timestamps otherwise. SOFTFABRIC_DEBUG_PCAP_LIMIT caps the frames
// recorded (default pcaplink.DefaultLimit; 0 means no limit) and
// SOFTFABRIC_DEBUG_PCAP_SNAPLEN the bytes kept of each (default: whole
// frames). It returns the link to use and a closer, which flushes and
// closes the file and prints a line about the capture on stderr; with the
// variable unset, l itself and a nil closer.
func debugCapture(l link.Link, iface string, stderr io.Writer) (link.Link, func() error, error) {
	path := os.Getenv(envPcap)
	if path == "" {
		return l, nil, nil
	}
	o := pcaplink.Options{Format: pcaplink.FormatOf(path), Name: iface}
	if s := os.Getenv(envPcapLimit); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("%s=%q: want a number of frames (0: no limit)", envPcapLimit, s)
		}
		o.Limit = n
		if n == 0 {
			o.Limit = -1
		}
	}
	if s := os.Getenv(envPcapSnapLen); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("%s=%q: want a number of bytes (0: whole frames)", envPcapSnapLen, s)
		}
		o.SnapLen = n
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", envPcap, err)
	}
	c, err := pcaplink.Wrap(l, f, o)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s: %w", envPcap, err)
	}
	closer := func() error {
		err := errors.Join(c.Close(), f.Close())
		s := c.Stats()
		msg := fmt.Sprintf("softfabric: %s: %d frames recorded in %s (%d received, %d sent)", envPcap, s.Recorded, path, s.In, s.Out)
		if s.NotRecorded > 0 {
			msg += fmt.Sprintf(", %d not recorded", s.NotRecorded)
		}
		if err != nil {
			msg += ": " + err.Error()
		} else if s.NotRecorded > 0 {
			msg += fmt.Sprintf(" (limit %d: raise %s)", s.Recorded, envPcapLimit)
		}
		fmt.Fprintln(stderr, msg)
		if err != nil {
			return fmt.Errorf("%s: %w", envPcap, err)
		}
		return nil
	}
	return c.Link(), closer, nil
}
