// Package pcapfix reads packet captures into frames, for tests that replay
// recorded traffic (fixtures: what Linux rxe sent, recorded by tcpdump or
// by dataplane/link/pcaplink) against the parser and the transport.
//
// It reads classic pcap (microsecond or nanosecond timestamps, either byte
// order, gzipped or not) and pcapng, of Ethernet frames only: capture on
// the interface itself (tcpdump -i eth0), not on "any", whose Linux cooked
// headers do not keep the Ethernet header. The direction of a frame is
// known only in a pcapng file written by pcaplink; elsewhere InferDirection
// derives it from a station's MAC address.
package pcapfix

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softfabric/softfabric/dataplane/link/pcaplink"
)

// Direction is pcaplink's: In, Out or Unknown.
type Direction = pcaplink.Direction

// Frame is one captured Ethernet frame.
type Frame struct {
	// Data is the captured bytes: the whole frame unless the capture's
	// snap length cut it short (then len(Data) < Length).
	Data []byte
	// Length is the frame's length on the wire.
	Length int
	Time   time.Time
	Dir    Direction
}

// Truncated reports whether the capture kept less than the whole frame.
func (f Frame) Truncated() bool { return len(f.Data) < f.Length }

// ReadFrames reads every frame of the capture file at path.
func ReadFrames(path string) ([]Frame, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	frames, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return frames, nil
}

// ngMagic is the block type of a pcapng section header, the first four
// bytes of a pcapng file (a palindrome: the same in either byte order).
const ngMagic = 0x0a0d0d0a

// Read reads every frame of a capture from r.
func Read(r io.Reader) ([]Frame, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("pcapfix: reading the file header: %w", err)
	}
	if binary.LittleEndian.Uint32(head) == ngMagic {
		return readNg(br)
	}
	return readPcap(br)
}

func readPcap(r io.Reader) ([]Frame, error) {
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("pcapfix: %w", err)
	}
	if lt := pr.LinkType(); lt != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("pcapfix: link type %v, want Ethernet (capture on the interface, not on \"any\")", lt)
	}
	var frames []Frame
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, fmt.Errorf("pcapfix: frame %d: %w", len(frames), err)
		}
		frames = append(frames, frame(data, ci, pcaplink.Unknown))
	}
}

func readNg(r io.Reader) ([]Frame, error) {
	opts := pcapgo.DefaultNgReaderOptions
	opts.WantMixedLinkType = true // refuse other link types instead of skipping them
	nr, err := pcapgo.NewNgReader(r, opts)
	if err != nil {
		return nil, fmt.Errorf("pcapfix: %w", err)
	}
	var frames []Frame
	for {
		data, ci, err := nr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames, nil
		}
		if err != nil {
			return frames, fmt.Errorf("pcapfix: frame %d: %w", len(frames), err)
		}
		if len(ci.AncillaryData) > 0 {
			if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok && lt != layers.LinkTypeEthernet {
				return frames, fmt.Errorf("pcapfix: frame %d: link type %v, want Ethernet (capture on the interface, not on \"any\")", len(frames), lt)
			}
		}
		dir := pcaplink.Unknown
		if intf, err := nr.Interface(ci.InterfaceIndex); err == nil {
			switch intf.Description {
			case pcaplink.InDescription:
				dir = pcaplink.In
			case pcaplink.OutDescription:
				dir = pcaplink.Out
			}
		}
		frames = append(frames, frame(data, ci, dir))
	}
}

func frame(data []byte, ci gopacket.CaptureInfo, dir Direction) Frame {
	return Frame{Data: data, Length: ci.Length, Time: ci.Timestamp, Dir: dir}
}

// InferDirection sets the direction of the frames whose direction is
// Unknown, as seen from the station with the given MAC address: Out when
// it is the frame's source, In when it is the destination (or the frame is
// broadcast or multicast and not from it). Frames it cannot place, or too
// short for an Ethernet header, stay Unknown.
func InferDirection(frames []Frame, mac [6]byte) {
	for i := range frames {
		f := &frames[i]
		if f.Dir != pcaplink.Unknown || len(f.Data) < 12 {
			continue
		}
		dst, src := [6]byte(f.Data[0:6]), [6]byte(f.Data[6:12])
		switch {
		case src == mac:
			f.Dir = pcaplink.Out
		case dst == mac || dst[0]&1 != 0:
			f.Dir = pcaplink.In
		}
	}
}
