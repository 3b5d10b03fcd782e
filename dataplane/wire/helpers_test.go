package wire

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

type vector struct {
	Name     string `json:"name"`
	Opcode   int    `json:"opcode"`
	FrameHex string `json:"frame_hex"`
	ICRCHex  string `json:"icrc_wire_hex"`

	frame []byte
	icrc  []byte
}

// loadVectors reads ../shared/vectors/roce_icrc_ipv4.json next to the
// repository root. The vectors live outside the module; a checkout without
// them skips, except in CI where a skip would hide a regression.
func loadVectors(tb testing.TB) []vector {
	tb.Helper()
	vs, err := readVectors()
	if errors.Is(err, fs.ErrNotExist) {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("known-answer vectors missing: %v", err)
		}
		tb.Skipf("known-answer vectors not available (%v); set CI=true to make this fatal", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return vs
}

func readVectors() ([]vector, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, errors.New("go.mod not found above the package directory")
		}
		dir = parent
	}
	path := filepath.Join(dir, "..", "shared", "vectors", "roce_icrc_ipv4.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	if len(file.Vectors) == 0 {
		return nil, fmt.Errorf("%s holds no vectors", path)
	}
	for i := range file.Vectors {
		v := &file.Vectors[i]
		if v.frame, err = hex.DecodeString(v.FrameHex); err != nil {
			return nil, fmt.Errorf("%s: frame_hex: %w", v.Name, err)
		}
		if v.icrc, err = hex.DecodeString(v.ICRCHex); err != nil || len(v.icrc) != ICRCSize {
			return nil, fmt.Errorf("%s: bad icrc_wire_hex %q", v.Name, v.ICRCHex)
		}
	}
	return file.Vectors, nil
}

// message is everything a test puts after the BTH.
type message struct {
	BTH       BTHFields
	RETHVA    uint64
	RETHRKey  uint32
	RETHLen   uint32
	Syndrome  uint8
	MSN       uint32
	AtomVA    uint64
	AtomRKey  uint32
	SwapAdd   uint64
	Compare   uint64
	OrigData  uint64
	Imm       uint32
	IETHRKey  uint32
	QKey      uint32
	SrcQP     uint32
	Payload   []byte
	ExtraTail int // Ethernet padding after the ICRC
}

// build lays out m after room for p's headers, sets the pad count, and
// finishes the frame with p.
func build(tb testing.TB, p *Path, m *message) []byte {
	tb.Helper()
	info := m.BTH.Opcode.Info()
	pad := -len(m.Payload) & 3
	n := p.HeaderLen() + info.HeaderLen + len(m.Payload) + pad + ICRCSize
	frame := make([]byte, n, n+m.ExtraTail)
	encodeTransport(frame[p.HeaderLen():], m, uint8(pad))
	p.Finish(frame)
	return frame[:n+m.ExtraTail]
}

func encodeTransport(b []byte, m *message, pad uint8) {
	info := m.BTH.Opcode.Info()
	f := m.BTH
	f.PadCount = pad
	BTH(b).Encode(&f)
	if info.RETH != 0 {
		RETH(b[info.RETH:]).Encode(m.RETHVA, m.RETHRKey, m.RETHLen)
	}
	if info.AETH != 0 {
		AETH(b[info.AETH:]).Encode(m.Syndrome, m.MSN)
	}
	if info.AtomicETH != 0 {
		AtomicETH(b[info.AtomicETH:]).Encode(m.AtomVA, m.AtomRKey, m.SwapAdd, m.Compare)
	}
	if info.AtomicAckETH != 0 {
		AtomicAckETH(b[info.AtomicAckETH:]).Encode(m.OrigData)
	}
	if info.ImmDt != 0 {
		ImmDt(b[info.ImmDt:]).Encode(m.Imm)
	}
	if info.IETH != 0 {
		IETH(b[info.IETH:]).Encode(m.IETHRKey)
	}
	if info.DETH != 0 {
		DETH(b[info.DETH:]).Encode(m.QKey, m.SrcQP)
	}
	copy(b[info.HeaderLen:], m.Payload)
}

// decodeTransport reads back what encodeTransport wrote.
func decodeTransport(p *Packet) message {
	m := message{BTH: p.BTH().Fields(), Payload: p.Payload}
	if h := p.RETH(); h != nil {
		m.RETHVA, m.RETHRKey, m.RETHLen = h.VA(), h.RKey(), h.DMALen()
	}
	if h := p.AETH(); h != nil {
		m.Syndrome, m.MSN = h.Syndrome(), h.MSN()
	}
	if h := p.AtomicETH(); h != nil {
		m.AtomVA, m.AtomRKey, m.SwapAdd, m.Compare = h.VA(), h.RKey(), h.SwapAdd(), h.Compare()
	}
	if h := p.AtomicAckETH(); h != nil {
		m.OrigData = h.OrigData()
	}
	if h := p.ImmDt(); h != nil {
		m.Imm = h.Imm()
	}
	if h := p.IETH(); h != nil {
		m.IETHRKey = h.RKey()
	}
	if h := p.DETH(); h != nil {
		m.QKey, m.SrcQP = h.QKey(), h.SrcQP()
	}
	return m
}

func mustPath(tb testing.TB, f PathFields) Path {
	tb.Helper()
	p, err := NewPath(f)
	if err != nil {
		tb.Fatalf("NewPath(%+v): %v", f, err)
	}
	return p
}

func v4Path() PathFields {
	return PathFields{
		SrcMAC:       [6]byte{0x02, 0, 0, 0, 0, 1},
		DstMAC:       [6]byte{0x02, 0, 0, 0, 0, 2},
		Src:          netip.MustParseAddr("192.0.2.1"),
		Dst:          netip.MustParseAddr("192.0.2.2"),
		TrafficClass: 0x6a,
		SrcPort:      SourcePort(0x11, 0x22),
	}
}

func v6Path() PathFields {
	return PathFields{
		SrcMAC:       [6]byte{0x02, 0, 0, 0, 0, 1},
		DstMAC:       [6]byte{0x02, 0, 0, 0, 0, 2},
		Src:          netip.MustParseAddr("2001:db8::1"),
		Dst:          netip.MustParseAddr("2001:db8::2"),
		TrafficClass: 0x6a,
		FlowLabel:    0x12345,
		HopLimit:     7,
	}
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}
