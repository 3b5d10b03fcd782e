package abi

// In-place setters for the fields SDMA rewrites per packet ([K]
// user_sdma.c set_txreq_header).

// SetPktLen sets LRH.PktLen [11:0], keeping the reserved bits above it.
func (h Header9B) SetPktLen(dws uint16) {
	be.PutUint16(h[4:], be.Uint16(h[4:])&^0xfff|dws&0xfff)
}

// SetPSN sets BTH.AckReq and the 31-bit BTH.PSN.
func (h Header9B) SetPSN(psn uint32, ackReq bool) {
	be.PutUint32(h[bthOff+8:], uint32(b2u(ackReq))<<31|psn&0x7fffffff)
}

// SetSWData sets KDETH software dword i (0..6).
func (h Header9B) SetSWData(i int, v uint32) { le.PutUint32(h[kdethSWDataAt+4*i:], v) }
