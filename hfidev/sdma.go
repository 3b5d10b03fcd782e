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
	chip     abi.Chip
	sys      sys.Sys
	fd       int
	comp     sys.Region
	ring     int
	fill     int // next slot to use
	done     int // oldest slot not yet reaped
	inFlight int

	req    [abi.SDMAReqInfoSize + abi.PktHeader16BSize]byte // info and template (9B: the first PktHeaderSize bytes)
	iov    [1 + abi.SDMAMaxDataIovs + 1][]byte
	tidBuf [4 * abi.SDMAMaxTIDEntries]byte
}

func newSDMA(c *Context) *SDMA {
	if c.Info.RuntimeFlags&abi.CapSDMA == 0 || c.Info.SDMARingSize == 0 {
		return nil
	}
	return &SDMA{chip: c.Chip, sys: c.sys, fd: c.fd, comp: c.maps[abi.MmapSDMAComp].Region, ring: int(c.Info.SDMARingSize)}
}

// InFlight is the number of submitted requests not yet reaped.
func (s *SDMA) InFlight() int { return s.inFlight }

// Submit sends data as one EAGER request and returns its slot. hdr is the
// first packet's header: 9B (abi.Header9B), or on JKR, when pbc's L2Type
// is abi.L2Type16B, 16B (abi.Header16B; the template is then PBC and 16B
// header, 72 bytes, the data must be whole quadwords, and the driver adds
// each packet's tail quadword: [C] hfi2 user_sdma.c). pbc supplies VL,
// SC4 and the other PBC bits. A WFR PBC with Bypass (16B) is refused.
// The data is cut into packets of fragSize bytes (the last carries the
// rest; no data makes one header-only packet); Submit sets the first
// packet's lengths in the template and the driver rewrites them, the PSN
// (+1 per packet), BTH.A (last packet) and KDETH SWData[6] (the byte
// offset, starting from hdr's) in the others. Data is read during the
// call; on the model it is copied, on hardware it must stay untouched
// until the slot completes.
func (s *SDMA) Submit(pbc abi.PBC, hdr []byte, fragSize int, data [][]byte) (uint16, error) {
	total := iovLen(data)
	npkts := 1
	if total > 0 && fragSize > 0 {
		npkts = (total + fragSize - 1) / fragSize
	}
	tsize, err := s.checkRequest(pbc, hdr, fragSize, data, total, npkts)
	if err != nil {
		return 0, err
	}
	copy(s.req[abi.SDMAReqInfoSize+abi.PBCSize:], hdr[:tsize-abi.PBCSize])
	return s.submit(abi.SDMAOpEager, pbc, tsize, fragSize, npkts, min(total, fragSize), data, nil)
}

// SubmitExpected sends data as one EXPECTED request: straight into the
// peer's buffer that tids (a TIDMap's Entries, or a run of them) map,
// starting at byte off of tids[0]. Packets never straddle two entries:
// each carries at most fragSize bytes and no more than is left of its
// entry; the driver rewrites KDETH TID, TIDCtrl, Offset and OM per packet
// (OM and 64-byte offsets for entries of 128 KiB and more), the PSN's low
// 11 bits, BTH.A and SWData[6]. off must be a multiple of tids[0]'s offset
// unit (abi.TIDEntry.OMUnit) and the data must fit in the entries from
// off; fragSize a multiple of 64. A 16B request also needs off a multiple
// of 8, so that every packet is whole quadwords. Otherwise as Submit; it
// does not allocate.
func (s *SDMA) SubmitExpected(pbc abi.PBC, hdr []byte, fragSize int, data [][]byte,
	tids []abi.TIDEntry, off int) (uint16, error) {
	total := iovLen(data)
	npkts, used, first, ok := expectedPackets(tids, off, fragSize, total)
	tsize, err := s.checkRequest(pbc, hdr, fragSize, data, total, npkts)
	if err != nil {
		return 0, err
	}
	if !ok || (tsize == abi.PktHeader16BSize && off%abi.FlitSize != 0) {
		return 0, fmt.Errorf("%w: %d bytes at offset %d of %d TIDs, fragment %d", ErrSDMARequest, total, off, len(tids), fragSize)
	}
	list := abi.TIDList(s.tidBuf[:4*used])
	for i := range used {
		list.Set(i, tids[i])
	}
	t := s.req[abi.SDMAReqInfoSize+abi.PBCSize : abi.SDMAReqInfoSize+tsize]
	copy(t, hdr[:tsize-abi.PBCSize])
	abi.BTHKDETH(t[len(t)-abi.BTHKDETHSize:]).SetKDETHTID(tids[0], off)
	return s.submit(abi.SDMAOpExpected, pbc, tsize, fragSize, npkts, first, data, list)
}

// expectedPackets walks an EXPECTED request as the driver will cut it
// (user_sdma.c compute_data_length): it returns the packet count, how many
// entries the data reaches, the first packet's length, and false if the
// request cannot be expressed (an offset off the unit or past the entry,
// data beyond the entries, a zero entry on the way).
func expectedPackets(tids []abi.TIDEntry, off, fragSize, total int) (npkts, used, first int, ok bool) {
	if len(tids) == 0 || fragSize <= 0 || fragSize%abi.PIOBlockSize != 0 || off < 0 ||
		off >= tids[0].Bytes() || off%tids[0].OMUnit() != 0 || off/tids[0].OMUnit() > 0x7fff {
		return 0, 0, 0, false
	}
	idx, toff, sent := 0, off, 0
	for {
		room := tids[idx].Bytes() - toff
		if room == 0 {
			if idx++; idx == len(tids) || idx == abi.SDMAMaxTIDEntries || tids[idx] == 0 {
				return 0, 0, 0, false
			}
			toff = 0
			continue
		}
		n := min(fragSize, room, total-sent)
		if npkts == 0 {
			first = n
		}
		npkts++
		sent += n
		toff += n
		if sent >= total {
			return npkts, idx + 1, first, true
		}
	}
}

func iovLen(data [][]byte) int {
	total := 0
	for _, d := range data {
		total += len(d)
	}
	return total
}

// checkRequest returns the template's size for pbc (PktHeaderSize for
// 9B, PktHeader16BSize for 16B), or why the request cannot be made.
func (s *SDMA) checkRequest(pbc abi.PBC, hdr []byte, fragSize int, data [][]byte, total, npkts int) (int, error) {
	if s.chip == abi.ChipWFR && pbc.Bypass() {
		return 0, fmt.Errorf("%w: %w", ErrSDMARequest, ErrBypass)
	}
	tsize := abi.PktHeaderSize
	if s.chip != abi.ChipWFR && pbc.L2Type() == abi.L2Type16B {
		tsize = abi.PktHeader16BSize
		if total%abi.FlitSize != 0 {
			return 0, fmt.Errorf("%w: 16B data of %d bytes, not whole quadwords", ErrSDMARequest, total)
		}
	}
	if len(data) > abi.SDMAMaxDataIovs || fragSize <= 0 || fragSize > 0xffff ||
		npkts > 0xffff || len(hdr) < tsize-abi.PBCSize {
		return 0, fmt.Errorf("%w: %d bytes in %d iovecs, fragment %d, %d-byte header", ErrSDMARequest, total, len(data), fragSize, len(hdr))
	}
	return tsize, nil
}

func (s *SDMA) tmpl() abi.PktHeader { return abi.PktHeader(s.req[abi.SDMAReqInfoSize:]) }

// submit writes the request whose header the template (tsize bytes with
// the PBC) already holds: its first packet of first bytes gets its
// lengths, then one writev of info, template, data and, for EXPECTED, the
// tidlist.
func (s *SDMA) submit(op uint8, pbc abi.PBC, tsize, fragSize, npkts, first int, data [][]byte, tids abi.TIDList) (uint16, error) {
	if s.inFlight >= s.ring-1 {
		return 0, ErrSDMARingFull
	}
	slot := uint16(s.fill)
	n := 1 + copy(s.iov[1:], data)
	if tids != nil {
		s.iov[n] = tids
		n++
	}
	info := abi.SDMAReqInfo{
		Ctrl:     abi.MakeSDMACtrl(abi.SDMAReqVersion, op, uint8(n)),
		NPkts:    uint16(npkts),
		FragSize: uint16(fragSize),
		CompIdx:  slot,
	}
	info.Marshal(s.req[:])
	tmpl := s.tmpl()
	if tsize == abi.PktHeader16BSize {
		// LRH.PktLen in flits, the tail quadword included; the PBC
		// counts the same bytes in dwords, and itself (lrh2pbc).
		flits := abi.PktLen16B(first)
		tmpl.Header16B().SetPktLen(flits)
		tmpl.SetPBC(pbc&^abi.PBCMaxLengthDWs | abi.PBC(int(flits)*abi.FlitSize/4+abi.PBCSize/4))
	} else {
		lrhDWs := (abi.Header9BSize + abi.ICRCSize + (first+3)&^3) / 4
		tmpl.Header().SetPktLen(uint16(lrhDWs))
		tmpl.SetPBC(pbc&^abi.PBCMaxLengthDWs | abi.PBC(lrhDWs+1))
	}

	s.iov[0] = s.req[:abi.SDMAReqInfoSize+tsize]
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
