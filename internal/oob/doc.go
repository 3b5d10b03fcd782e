// Package oob holds the TCP dial the exchanges share (Dial); its
// subpackages are the out-of-band exchanges of the rdma-core family of tools, written as plain protocol
// code over a net.Conn so that any client of package fabric can speak
// them:
//
//   - rdmacore: the "LID:QPN:PSN:GID" exchange of rdma-core's
//     libibverbs/examples (ibv_rc_pingpong, ibv_ud_pingpong,
//     ibv_srq_pingpong);
//   - perftest: linux-rdma perftest's exchange (versions, system data,
//     MTU, key messages, hand-shakes, BW reports).
package oob
