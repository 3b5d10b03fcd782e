// Package wire provides zero-copy views, builders and checks for RoCEv2
// frames: Ethernet, IPv4, IPv6, UDP, the InfiniBand transport headers and the
// invariant CRC.
//
// A view is a byte slice given a type (type BTH []byte) whose methods read
// and write fields in place; a view never copies and never allocates. Views
// do no bounds checking of their own beyond Go's: check IsValid, or obtain
// the view from a parsed Packet, which guarantees every view it hands out is
// long enough. Each view has a Fields struct (or plain arguments) and an
// Encode method for building.
//
// The opcode table is data: each opcode declares a Mask of the headers it
// carries and what it means; header offsets and lengths are computed from
// the IBTA header order when the package is initialised. Packet.Parse, the
// ICRC and Path.Finish are the per-packet hot path and do not allocate.
package wire
