// Package daemonapi is the control protocol between the softfabric daemon
// (ctrl/daemon), which owns a device, and the applications it serves
// (device.Attach): JSON messages, one per datagram, over a unix
// SOCK_SEQPACKET socket in the device's run directory, with file
// descriptors (shared-memory regions and eventfds, memory an application
// shares) passed as SCM_RIGHTS.
//
// The socket carries set-up only (attach, queue pair numbers, connections,
// shared memory, statistics); frames move through the shared-memory rings of
// dataplane/link/shmlink. The connection lives as long as the
// application's attachment: when it closes, the daemon releases
// everything the application had, and an application that sees it close
// knows the daemon is gone.
package daemonapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the protocol version; attach refuses another.
const Version = 1

// SocketName is the control socket's name in the device's run directory.
const SocketName = "daemon.sock"

// PIDName is the daemon's pid file in the run directory.
const PIDName = "daemon.pid"

// SocketPath is the control socket of the device whose run directory is
// runDir.
func SocketPath(runDir string) string { return filepath.Join(runDir, SocketName) }

// Operations.
const (
	OpAttach   = "attach"
	OpSetQP    = "set_qp"
	OpDeleteQP = "delete_qp"
	OpConnect  = "connect"
	OpStats    = "stats"
	OpReport   = "report"
	// OpListen and OpUnlisten route RDMA-CM connection requests for a
	// service ID to the application (it must hold QP1: set_qp 1, which
	// any number of applications may; their communication IDs carry
	// their number's low 16 bits in their top 16).
	OpListen   = "listen"
	OpUnlisten = "unlisten"
	// OpAddMemory shares memory with the daemon, so that it can place
	// received payloads straight into it: the request carries one
	// descriptor, a memfd sealed against shrinking and growing
	// (F_SEAL_SHRINK and F_SEAL_GROW: a file the application could
	// truncate would make the daemon's writes fault) of at least Size
	// bytes, a multiple of the page size, which the daemon maps
	// (MAP_SHARED) as the application's region Region. OpDeleteMemory
	// drops region Region: once it answers, the daemon has unmapped it and
	// writes no more into it. Both fail with ErrInvalid (a descriptor
	// that is not such a memfd, an ID in use or unknown, a limit reached).
	OpAddMemory    = "add_memory"
	OpDeleteMemory = "delete_memory"
)

// Request is a message from an application.
type Request struct {
	Op string `json:"op"`
	// Attach.
	Version int    `json:"version,omitempty"`
	Name    string `json:"name,omitempty"` // the application's name, for status
	// SetQP, DeleteQP, Connect.
	QPN uint32 `json:"qpn,omitempty"`
	// Listen, Unlisten: the RDMA-CM service ID.
	Service uint64 `json:"service,omitempty"`
	// Connect: the RC peer QPN's GID and number.
	Peer    netip.Addr `json:"peer,omitzero"`
	DestQPN uint32     `json:"dest_qpn,omitempty"`
	// Report: the application's transport counters, sent every second.
	Transport *Transport `json:"transport,omitempty"`
	// AddMemory, DeleteMemory: the region's ID (the application picks it,
	// unique among its regions) and, to add it, its size in bytes.
	Region uint32 `json:"region,omitempty"`
	Size   uint64 `json:"size,omitempty"`
}

// Transport are an application's transport counters, summed over its queue
// pairs (those destroyed included), as it reports them: the daemon cannot
// see inside the transport, which runs in the application.
type Transport struct {
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	// LateTimeouts are the timeouts noticed over a timeout late (the
	// application's worker starved), which spent no retry.
	LateTimeouts uint64 `json:"late_timeouts"`
	SeqNAKsSent  uint64 `json:"seq_naks_sent"`
	SeqNAKsRcvd  uint64 `json:"seq_naks_rcvd"`
	RNRNAKsSent  uint64 `json:"rnr_naks_sent"`
	RNRNAKsRcvd  uint64 `json:"rnr_naks_rcvd"`
	ErrNAKsSent  uint64 `json:"err_naks_sent"`
	ErrNAKsRcvd  uint64 `json:"err_naks_rcvd"`
	CQOverruns   uint64 `json:"cq_overruns"`
	// Misaddressed are packets from an address other than the peer their
	// queue pair is connected to, dropped.
	Misaddressed uint64 `json:"misaddressed"`
}

// Add adds o's counters to t's.
func (t *Transport) Add(o Transport) {
	t.Retransmits += o.Retransmits
	t.Timeouts += o.Timeouts
	t.LateTimeouts += o.LateTimeouts
	t.SeqNAKsSent += o.SeqNAKsSent
	t.SeqNAKsRcvd += o.SeqNAKsRcvd
	t.RNRNAKsSent += o.RNRNAKsSent
	t.RNRNAKsRcvd += o.RNRNAKsRcvd
	t.ErrNAKsSent += o.ErrNAKsSent
	t.ErrNAKsRcvd += o.ErrNAKsRcvd
	t.CQOverruns += o.CQOverruns
	t.Misaddressed += o.Misaddressed
}

// Error codes in Reply.Code, matched by the errors below.
const (
	CodeDenied   = "denied"
	CodeQPNInUse = "qpn_in_use"
	CodeInvalid  = "invalid"
	CodeVersion  = "version"
)

// Errors a reply can carry (Reply.Err wraps the one of its Code).
var (
	ErrDenied   = errors.New("not allowed to use this softfabric daemon")
	ErrQPNInUse = errors.New("queue pair number in use")
	ErrInvalid  = errors.New("invalid request")
	ErrVersion  = errors.New("protocol version mismatch")
)

// Reply answers a Request.
type Reply struct {
	Err    string      `json:"err,omitempty"`
	Code   string      `json:"code,omitempty"`
	Attach *AttachInfo `json:"attach,omitempty"`
	Stats  *Stats      `json:"stats,omitempty"`
}

// Error is the reply's error, nil when it succeeded.
func (r *Reply) Error() error {
	if r.Err == "" && r.Code == "" {
		return nil
	}
	var base error
	switch r.Code {
	case CodeDenied:
		base = ErrDenied
	case CodeQPNInUse:
		base = ErrQPNInUse
	case CodeVersion:
		base = ErrVersion
	default:
		base = ErrInvalid
	}
	// The daemon's message begins with the base error's, which %w adds.
	return fmt.Errorf("%w: %s", base, strings.TrimPrefix(r.Err, base.Error()+": "))
}

// Fail builds the reply of an error, with the code of the error it wraps.
func Fail(err error) Reply {
	r := Reply{Err: err.Error(), Code: CodeInvalid}
	switch {
	case errors.Is(err, ErrDenied):
		r.Code = CodeDenied
	case errors.Is(err, ErrQPNInUse):
		r.Code = CodeQPNInUse
	case errors.Is(err, ErrVersion):
		r.Code = CodeVersion
	}
	return r
}

// AttachInfo describes the device to an attached application. The reply
// carries 3 descriptors per queue (shmlink.Region.FDs order).
type AttachInfo struct {
	App      uint32       `json:"app"`
	Iface    string       `json:"iface"`
	Ifindex  int          `json:"ifindex"`
	MAC      [6]byte      `json:"mac"`
	MTU      int          `json:"mtu"`
	GIDs     []netip.Addr `json:"gids"`
	Queues   int          `json:"queues"`
	Slots    int          `json:"slots"`
	SlotSize int          `json:"slot_size"`
}

// Stats is what `softfabric status` and `stats` show of a daemon.
type Stats struct {
	PID     int           `json:"pid"`
	Iface   string        `json:"iface"`
	Since   time.Time     `json:"since"`
	Workers []WorkerStats `json:"workers"`
	Apps    []AppStats    `json:"apps"`
	// RingSlots and SlotSize size each of an application's rings, two a
	// queue: RingBytes in all, per application.
	RingSlots int    `json:"ring_slots"`
	SlotSize  int    `json:"slot_size"`
	RingBytes uint64 `json:"ring_bytes"`
	// Refused counts the control connections of users the daemon does
	// not admit (each answered with its refusal), and Dropped those it
	// closed at once, past its limits on connections.
	Refused uint64 `json:"refused_connections"`
	Dropped uint64 `json:"dropped_connections"`
}

// WorkerStats count a daemon worker's frames (one per queue).
type WorkerStats struct {
	Queue     int    `json:"queue"`
	RxFrames  uint64 `json:"rx_frames"`  // from the NIC
	TxFrames  uint64 `json:"tx_frames"`  // to the NIC
	Unknown   uint64 `json:"unknown"`    // received for no application's QPN
	Malformed uint64 `json:"malformed"`  // received or sent, unparsable
	Sleeps    uint64 `json:"sleeps"`     // times it blocked idle
	Passes    uint64 `json:"passes"`     // loop passes
	TxStalls  uint64 `json:"tx_stalls"`  // passes that found the NIC's tx ring full
	Kicks     uint64 `json:"kicks"`      // sendto(2) calls that pushed the tx ring to the NIC (TxFrames/Kicks: frames a call)
	RingFulls uint64 `json:"ring_fulls"` // frames dropped on an application's full ring
	Parked    uint64 `json:"parked"`     // frames kept aside for an application's full ring, delivered when it has room
	ParkedNow uint64 `json:"parked_now"` // of those, waiting now
	CMRejects uint64 `json:"cm_rejects"` // RDMA-CM requests no application took, rejected by the daemon
	Looped    uint64 `json:"looped"`     // frames between applications on the device, switched without the NIC
	// Expectations this worker handed to another, the one their
	// packets arrive at, and those that did not take effect on the way
	// (a full ring here, or, there, responses already passed).
	ExpectationsHanded uint64 `json:"expectations_handed,omitempty"`
	ExpectationsLate   uint64 `json:"expectations_late,omitempty"`

	// Forwarder: a queue that came into use after the daemon started,
	// whose frames go to worker Home (RingFulls: those dropped on the
	// way).
	Forwarder bool `json:"forwarder,omitempty"`
	Home      int  `json:"home,omitempty"`
}

// AppStats describe an attached application.
type AppStats struct {
	ID       uint32    `json:"id"`
	PID      int       `json:"pid"`
	UID      int       `json:"uid"`
	Name     string    `json:"name"`
	Since    time.Time `json:"since"`
	QPs      []uint32  `json:"qps"`
	Conns    int       `json:"conns"`
	RxFrames uint64    `json:"rx_frames"` // delivered to it
	TxFrames uint64    `json:"tx_frames"` // sent for it
	Denied   uint64    `json:"denied"`    // frames it sent that it may not send
	Dropped  uint64    `json:"dropped"`   // frames for it dropped on its full ring
	// MemRegions and MemBytes are the memory it shares with the daemon
	// (OpAddMemory).
	MemRegions int    `json:"mem_regions"`
	MemBytes   uint64 `json:"mem_bytes"`
	// Placed counts the frames for it whose payload the daemon wrote
	// straight into that memory; Expectations the runs of packets it
	// announced (where their payload goes) that the daemon took, and
	// ExpectationsRefused those it refused (another's queue pair, memory
	// it does not share, impossible sizes).
	Placed uint64 `json:"placed"`
	// Gathered counts the frames it sent whose payload the daemon took
	// from that memory (it built only their headers).
	Gathered            uint64 `json:"gathered"`
	Expectations        uint64 `json:"expectations"`
	ExpectationsRefused uint64 `json:"expectations_refused"`
	// Transport is what it last reported (nil before its first report).
	Transport *Transport `json:"transport,omitempty"`
}

// maxMessage bounds a message; stats of many applications fit.
const maxMessage = 1 << 20

// Write sends v as one message, with fds attached.
func Write(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// Read receives one message into v and returns the descriptors it
// carried (the caller owns them). It returns io.EOF when the peer closed.
func Read(c *net.UnixConn, v any) ([]int, error) {
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4*64))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if errors.Is(err, io.EOF) {
		return nil, errEOF
	}
	if err != nil {
		return nil, err
	}
	fds, ferr := parseRights(oob[:oobn])
	if n == 0 && oobn == 0 {
		return nil, errEOF
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || ferr != nil {
		closeAll(fds)
		return nil, fmt.Errorf("%w: truncated message", ErrInvalid)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return fds, nil
}

var errEOF = fmt.Errorf("control socket closed: %w", net.ErrClosed)

// IsClosed reports whether err from Read means the peer went away.
func IsClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, unix.ECONNRESET)
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// Dial connects to the control socket of the device whose run directory
// is runDir.
func Dial(runDir string) (*net.UnixConn, error) {
	return net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: SocketPath(runDir), Net: "unixpacket"})
}

// SocketPair returns two connected unix SOCK_SEQPACKET sockets, the kind
// Dial and the daemon's listener make: a control connection with no
// socket file, for tests and for a daemon run in-process.
func SocketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "seqpacket")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if cs[0] != nil {
				cs[0].Close()
			}
			if i == 0 {
				_ = unix.Close(fds[1])
			}
			return nil, nil, err
		}
		cs[i] = c.(*net.UnixConn)
	}
	return cs[0], cs[1], nil
}

// Call sends req and reads its reply (with its descriptors).
func Call(c *net.UnixConn, req Request) (Reply, []int, error) {
	if err := Write(c, req, nil); err != nil {
		return Reply{}, nil, err
	}
	var r Reply
	fds, err := Read(c, &r)
	if err != nil {
		return Reply{}, nil, err
	}
	if err := r.Error(); err != nil {
		closeAll(fds)
		return r, nil, err
	}
	return r, fds, nil
}
