// Package link defines the one I/O seam between the transport engine and a
// network: batches of whole Ethernet frames in, batches out.
//
// Implementations: memlink (an in-memory pair with fault injection, for tests
// and benchmarks), AF_XDP (dataplane/xsk) and an HFI context
// (hfidev/hfilink, the frames carried as OPA 9B packets). The engine sees
// only this interface, so the same transport code runs over all of them.
package link

import (
	"errors"
	"time"
)

// IdealBatch is the batch size the engine uses for Send and Recv: large
// enough to amortise a lock or a ring doorbell per call, small enough to keep
// a batch of frame buffers in cache.
const IdealBatch = 64

// ErrFrameTooLarge is returned (wrapped) by Send for a frame longer than
// MaxFrame, and by Recv when a waiting frame does not fit a buffer.
var ErrFrameTooLarge = errors.New("frame too large")

// Link carries whole Ethernet frames in batches.
//
// A Link is not required to be safe for concurrent use by several senders
// or several receivers; implementations document what they allow.
type Link interface {
	// Send transmits frames. Each frame is copied before Send returns, so
	// the caller may reuse its buffers. It returns how many frames were
	// taken; fewer than len(frames) means the link is full (backpressure)
	// and the caller should retry the rest later. A frame taken may still
	// be lost on the way, as on any network.
	Send(frames [][]byte) (int, error)

	// Recv copies up to len(bufs) waiting frames into bufs[i][:cap(bufs[i])]
	// and stores their lengths in sizes[i]. It returns the number received;
	// 0 and nil when nothing is waiting. It never blocks. Buffers should
	// have a capacity of at least MaxFrame.
	Recv(bufs [][]byte, sizes []int) (int, error)

	// MaxFrame is the largest frame the link carries, link headers
	// included.
	MaxFrame() int
}

// Waiter is a Link that can block until frames arrive, so that an idle
// engine sleeps in the kernel instead of polling.
type Waiter interface {
	// Wait returns when frames may be waiting to be received, or after
	// timeout. It may return early.
	Wait(timeout time.Duration) error
}

// ZeroCopyReceiver is a Link that can lend received frames in place (an
// AF_XDP socket's UMEM) instead of copying them out: the engine parses
// and places straight from them, then gives them back.
type ZeroCopyReceiver interface {
	// RecvZC fills views with received frames and returns how many; they
	// stay valid until ReleaseRx. It never blocks.
	RecvZC(views [][]byte) int
	// ReleaseRx returns the frames of the last RecvZC to the link.
	ReleaseRx()
}

// Failer is a Link that can fail for good (its peer gone): Err returns
// why, nil while it works. A receiver that uses only RecvZC, which cannot
// return an error, checks it.
type Failer interface {
	Err() error
}

// TxFramer is a Link that lets the sender build frames in place, in the
// buffers the device transmits from (an AF_XDP socket's UMEM chunks), so
// that a frame is written once and never copied on its way out: headers
// and payload are gathered straight into it. A Batch made by NewBatchFor
// uses it.
type TxFramer interface {
	// TxBuf returns a free transmit buffer of TxBufSize bytes, or nil
	// when none is free. Called again before TxSubmit, it returns the
	// same buffer.
	TxBuf() []byte
	// TxSubmit queues the frame built in the last TxBuf, n bytes long,
	// for the next Flush; n <= 0 gives the buffer back unsent.
	TxSubmit(n int)
	// TxRoom is how many more frames TxBuf and TxSubmit can take now.
	TxRoom() int
	// TxBufSize is the length of the buffers TxBuf returns.
	TxBufSize() int
	// Flush hands the queued frames to the device. Frames the device
	// cannot take yet stay queued in the link for the next Flush.
	Flush() error
}

// Expectation announces a run of RC data packets this end will receive
// and where their payload goes: packet k (PSN + k) carries bytes
// [k×MTU, (k+1)×MTU) of Buf, the last one the rest. The transport makes
// one for each RDMA READ it asks for (the responses' payload goes to the
// local buffer), for each multi-packet RDMA WRITE it accepts (the packets
// after the first go to the target buffer) and for each multi-packet SEND
// (the rest goes to the receive buffer; the message may end before the
// buffer does, at a packet with a last opcode).
type Expectation struct {
	Peer    [16]byte // the sender's address (its GID, 16-byte form)
	PeerQPN uint32   // the sender's queue pair
	QPN     uint32   // this end's queue pair: the packets' destination
	PSN     uint32   // the first packet's PSN
	Packets uint32   // how many packets
	MTU     int      // payload bytes of every packet but the last
	// Responses is set when the packets answer this end's own request
	// (a READ's responses): announced before the request leaves, so
	// before any of them can arrive. The rest of a WRITE or SEND is
	// announced after its first packets arrived, when later ones may be
	// on their way to the transport already.
	Responses bool
	Buf       []byte // where the payload goes, len = the total
}

// Expecter is a Link whose device can place the payload of announced
// packets straight into memory (an HFI's expected receive): the sender's
// device writes it where the Expectation says, and the receiver copies
// nothing. The link may take an expectation or ignore it (too small, no
// resources); the transport's behaviour is the same either way, since
// packets it did not place arrive as usual, and Placer says which were.
type Expecter interface {
	// Expect announces e. It is called on the engine's goroutine, must not
	// block, and must not keep e past the call (Buf it may keep: the
	// memory stays the transport's).
	Expect(e *Expectation)
}

// Gatherer is a TxFramer whose device can take a frame's payload from
// the memory it lies in when it sends the frame, instead of from the
// frame's buffer (the daemon, from memory the application shares with
// it): the transport builds the headers, the pad and the ICRC, and
// copies no payload.
type Gatherer interface {
	// TxGather announces that the frame being built in the buffer TxBuf
	// lent carries payload at byte at, by reference: the buffer's bytes
	// there are not filled in. It reports false when the device cannot
	// reach payload; the caller then copies it in as usual. TxSubmit ends
	// the announcement, and so does a TxSubmit of nothing.
	TxGather(at int, payload []byte) bool
}

// Placer is a Link whose Recv (or RecvZC) may return frames whose payload
// the device already placed (see Expecter). Such a frame has every header
// and its full length, but its payload bytes are not filled in; Placed
// gives the payload where it lies, and the link has checked the frame's
// ICRC over it.
type Placer interface {
	// Placed reports the payload of frame i of the last Recv or RecvZC if
	// the device placed it, and false for an ordinary frame. A nil
	// payload with true means it was placed where the link can no longer
	// reach (memory given back meanwhile): drop the frame.
	Placed(i int) ([]byte, bool)
}
