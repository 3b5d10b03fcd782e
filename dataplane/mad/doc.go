// Package mad provides zero-copy views, builders and checks for InfiniBand
// management datagrams (MADs) and the Communication Manager (CM) messages
// they carry, as the Linux kernel CM and rdma_cm put them on the wire.
//
// A MAD is 256 bytes: a 24-byte common header (IBTA Vol. 1 13.4.2, struct
// ib_mad_hdr) and 232 bytes of class data. CM messages (management class
// 0x07, class version 2, method Send) are views over those 232 bytes: REQ,
// REP, REJ, RTU, DREQ, DREP, MRA, SIDRREQ and SIDRREP. Field offsets are the
// byte offsets of IBTA Vol. 1 chapter 12 (Tables 106-120) as Linux declares
// them in include/rdma/ibta_vol1_c12.h (older kernels: the accessors of
// drivers/infiniband/core/cm_msgs.h); every offset is also pinned by a
// known-answer test.
//
// A view is a byte slice given a type (type REQ []byte) whose methods read
// fields in place; a view never copies and never allocates. Views check no
// bounds beyond Go's own: call IsValid first, or obtain the view from a MAD
// returned by Parse, whose Data is always long enough for every message
// view. Each message has a Fields struct, a Fields method that decodes it and
// an Encode method that writes a whole message (reserved bits zero) for
// building.
//
// CMAHeader is rdma_cm's header at the start of a REQ's or SIDR_REQ's
// private data (struct cma_hdr in drivers/infiniband/core/cma.c), and
// ServiceID/SplitServiceID build and take apart rdma_cm's service IDs.
//
// Not covered: LAP and APR (alternate path management, which Linux does not
// support on RoCE either) and ClassPortInfo have attribute IDs here but no
// views.
package mad
