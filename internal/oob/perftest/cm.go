package perftest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// perftest's RDMA-CM mode (-R) runs the same steps in the same order as
// the TCP exchange above, with these differences (perftest 6.06, the
// sources of Debian's 4.5-0.17 package):
//
//   - the channel is an RC connection made with rdma_connect and
//     rdma_accept on the test's port (rdma_client_connect,
//     rdma_server_connect in src/perftest_communication.c): one message a
//     SEND, into one receive of sizeof(struct pingpong_dest), 56 bytes,
//     posted before connecting and again after each message is read
//     (post_one_recv_wqe, rdma_read_data, rdma_write_data). Its
//     conn_param has no private data, responder resources and initiator
//     depth 0 (create_comm_struct makes its verb SEND), retry_count -r
//     (7), rnr_retry_count 7. MsgConn is this channel.
//   - a key message is struct pingpong_dest itself, each field
//     big-endian (rdma_write_keys, HAVE_ENDIAN): 56 bytes, not 108
//     characters (CMKeyMsgSize, Dest.MarshalCM).
//   - after the prelude, create_rdma_cm_connection (the bw mains) runs a
//     barrier, then connects one more rdma_cm connection per test QP on
//     the same port (the server listens anew once its control listener is
//     gone; the client retries a rejected attempt up to 10 times, 100 ms
//     apart), then another barrier; ctx_connect and the GID check are
//     skipped, everything after is as over TCP.
//   - ctx_close_connection sends no "done".
//
// At the end the client disconnects each test QP (rdma_cm_disconnect_nodes,
// waiting for each DISCONNECTED) and the server disconnects its last; the
// control connection goes with rdma_destroy_id.

// CMKeyMsgSize is sizeof(struct pingpong_dest): a key message in the
// RDMA-CM mode.
const CMKeyMsgSize = 56

// MarshalCM is d as rdma_write_keys sends it: struct pingpong_dest with
// every integer big-endian (lid, out_reads, qpn, psn, rkey, 4 bytes of
// padding, vaddr, the GID's 16 bytes, srqn, gid_index).
func (d Dest) MarshalCM() []byte {
	b := make([]byte, CMKeyMsgSize)
	be := binary.BigEndian
	be.PutUint32(b[0:], d.LID)
	be.PutUint32(b[4:], d.OutReads)
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VA)
	if d.GID.IsValid() {
		g := d.GID.As16()
		copy(b[32:48], g[:])
	}
	be.PutUint32(b[48:], d.SRQN)
	return b
}

// ParseDestCM reads a key message as rdma_read_keys does (which ignores
// srqn and gid_index): its fields big-endian, the QPN and PSN within 24
// bits.
func ParseDestCM(msg []byte) (Dest, error) {
	if len(msg) < 48 {
		return Dest{}, fmt.Errorf("perftest exchange: a key message of %d bytes, not %d", len(msg), CMKeyMsgSize)
	}
	be := binary.BigEndian
	d := Dest{LID: be.Uint32(msg[0:]), OutReads: be.Uint32(msg[4:]), RKey: be.Uint32(msg[16:]), VA: be.Uint64(msg[24:])}
	d.QPN = be.Uint32(msg[8:]) & 0xffffff
	d.PSN = be.Uint32(msg[12:]) & 0xffffff
	d.GID = netip.AddrFrom16([16]byte(msg[32:48]))
	if len(msg) >= 52 {
		d.SRQN = be.Uint32(msg[48:])
	}
	return d, nil
}

// KeySize is the size of a key message on c: 108 bytes over TCP, 56 in
// the RDMA-CM mode.
func (c *Conn) KeySize() int {
	if c.CM {
		return CMKeyMsgSize
	}
	return KeyMsgSize
}

// MarshalKey is d as c's key message.
func (c *Conn) MarshalKey(d Dest) []byte {
	if c.CM {
		return d.MarshalCM()
	}
	return d.Marshal()
}

// ParseKey parses one of c's key messages.
func (c *Conn) ParseKey(msg []byte) (Dest, error) {
	if c.CM {
		return ParseDestCM(msg)
	}
	return ParseDest(msg)
}
