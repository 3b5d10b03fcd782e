package abi

// In-place setters for the fields SDMA rewrites per packet ([K]
// user_sdma.c set_txreq_header).

// SetPktLen sets LRH.PktLen [11:0], keeping the reserved bits above it.
func (h Header9B) SetPktLen(dws uint16) {
	be.PutUint16(h[4:], be.Uint16(h[4:])&^0xfff|dws&0xfff)
}

// SetPSN sets BTH.AckReq and the 31-bit BTH.PSN.
func (h Header9B) SetPSN(psn uint32, ackReq bool) { h.BTHKDETH().SetPSN(psn, ackReq) }

// SetSWData sets KDETH software dword i (0..6).
func (h Header9B) SetSWData(i int, v uint32) { h.BTHKDETH().SetSWData(i, v) }

// SetKDETHTID sets KDETH dword 0's TID [25:16], TIDCtrl [27:26], Offset
// [14:0] and OM (15) for a packet landing at byte off of entry e, in e's
// offset unit, keeping Intr, SH and KVer.
func (h Header9B) SetKDETHTID(e TIDEntry, off int) { h.BTHKDETH().SetKDETHTID(e, off) }

// TIDOffset is the byte offset KDETH.Offset and OM give: Offset×64 with
// OM, Offset×4 without.
func (h Header9B) TIDOffset() int { return h.BTHKDETH().TIDOffset() }
