package hfidev

import (
	"errors"
	"fmt"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/sys"
)

// SDMA errors.
var (
	// ErrSDMARingFull: every completion slot but one is in flight (the
	// slack OPX keeps); Reap some first.
	ErrSDMARingFull = errors.New("hfidev: SDMA completion ring full")
	// ErrSDMARequest: the request cannot be expressed in sdma_req_info
	// (more than 8 data iovecs, more than 65535 packets or fragment bytes).
	ErrSDMARequest = errors.New("hfidev: bad SDMA request")
)

// SDMACompletion is a reaped completion-ring slot.
type SDMACompletion struct {
	Slot   uint16
	Status abi.SDMACompState // SDMAComplete or SDMAError
	// ErrCode is the driver's positive errno for SDMAError.
	ErrCode uint32
}

// SDMA submits user SDMA requests — one writev of sdma_req_info, the
// 64-byte header template and the data iovecs per request — using the
// completion-ring slots in order, and reaps their completions in that
// order, as OPX does ([O] fi_opx_hfi1_sdma.c). It is owned by one
// goroutine and does not allocate.
type SDMA struct {
	sys      sys.Sys
	fd       int
	comp     sys.Region
	ring     int
	fill     int // next slot to use
	done     int // oldest slot not yet reaped
	inFlight int

	req [abi.SDMAReqInfoSize + abi.PktHeaderSize]byte
	iov [1 + abi.SDMAMaxDataIovs][]byte
}

func newSDMA(c *Context) *SDMA {
	if c.Info.RuntimeFlags&abi.CapSDMA == 0 || c.Info.SDMARingSize == 0 {
		return nil
	}
	return &SDMA{sys: c.sys, fd: c.fd, comp: c.maps[abi.MmapSDMAComp].Region, ring: int(c.Info.SDMARingSize)}
}

// InFlight is the number of submitted requests not yet reaped.
func (s *SDMA) InFlight() int { return s.inFlight }

// Submit sends data as one EAGER request and returns its slot. hdr is the
// first packet's 9B header; pbc supplies VL, SC4 and the other PBC bits.
// The data is cut into packets of fragSize bytes (the last carries the
// rest; no data makes one header-only packet); Submit sets the first
// packet's lengths in the template and the driver rewrites them, the PSN
// (+1 per packet), BTH.A (last packet) and KDETH SWData[6] (the byte
// offset, starting from hdr's) in the others. Data is read during the
// call; on the model it is copied, on hardware it must stay untouched
// until the slot completes.
func (s *SDMA) Submit(pbc abi.PBC, hdr abi.Header9B, fragSize int, data [][]byte) (uint16, error) {
	total := 0
	for _, d := range data {
		total += len(d)
	}
	npkts := 1
	if total > 0 && fragSize > 0 {
		npkts = (total + fragSize - 1) / fragSize
	}
	if len(data) > abi.SDMAMaxDataIovs || fragSize <= 0 || fragSize > 0xffff ||
		npkts > 0xffff || hdr.Check() != nil {
		return 0, fmt.Errorf("%w: %d bytes in %d iovecs, fragment %d", ErrSDMARequest, total, len(data), fragSize)
	}
	if s.inFlight >= s.ring-1 {
		return 0, ErrSDMARingFull
	}
	slot := uint16(s.fill)
	info := abi.SDMAReqInfo{
		Ctrl:     abi.MakeSDMACtrl(abi.SDMAReqVersion, abi.SDMAOpEager, uint8(1+len(data))),
		NPkts:    uint16(npkts),
		FragSize: uint16(fragSize),
		CompIdx:  slot,
	}
	info.Marshal(s.req[:])
	tmpl := abi.PktHeader(s.req[abi.SDMAReqInfoSize:])
	copy(tmpl.Header(), hdr[:abi.Header9BSize])
	first := min(total, fragSize)
	lrhDWs := (abi.Header9BSize + abi.ICRCSize + (first+3)&^3) / 4
	tmpl.Header().SetPktLen(uint16(lrhDWs))
	tmpl.SetPBC(pbc&^abi.PBCMaxLengthDWs | abi.PBC(lrhDWs+1))

	s.iov[0] = s.req[:]
	n := 1 + copy(s.iov[1:], data)
	_, err := s.sys.Writev(s.fd, s.iov[:n])
	clear(s.iov[:n])
	if err != nil {
		return 0, fmt.Errorf("hfidev: SDMA writev (slot %d): %w", slot, err)
	}
	if s.fill++; s.fill == s.ring {
		s.fill = 0
	}
	s.inFlight++
	return slot, nil
}

// Reap returns the oldest submitted request's completion once its slot
// has left QUEUED; false while it is still queued (later slots may have
// completed first: they wait their turn) or nothing is in flight.
func (s *SDMA) Reap() (SDMACompletion, bool) {
	if s.inFlight == 0 {
		return SDMACompletion{}, false
	}
	w := s.comp.Load64(s.done * abi.SDMACompEntrySize)
	st := abi.SDMACompState(uint32(w))
	if st == abi.SDMAQueued {
		return SDMACompletion{}, false
	}
	c := SDMACompletion{Slot: uint16(s.done), Status: st, ErrCode: uint32(w >> 32)}
	if s.done++; s.done == s.ring {
		s.done = 0
	}
	s.inFlight--
	return c, true
}
