// Package hfilink is the transport engine's link (dataplane/link) over an
// HFI context (hfidev.Context): the RC and UD queue pairs of
// dataplane/rc and dataplane/ud, unchanged, run over Omni-Path and CN5000
// HFIs through the hfi1 user API, or over the software model of one
// (hfidev/model).
//
// The engine speaks RoCEv2: it builds and parses whole Ethernet frames
// (Ethernet, IPv4 or IPv6, UDP 4791, the IB BTH and extension headers,
// payload, ICRC). An HFI user context sends and receives OPA 9B packets
// (LRH, BTH, KDETH) and the chip delivers to a user context only KDETH
// packets: BTH.Opcode in 0xC0–0xFF and BTH.QP[23:16] = 0x80, with
// BTH.QP[7:0] naming the receive context. So on transmit the link strips
// the frame's Ethernet/IP/UDP headers and sends
//
//	LRH     VL 0, SL 0, LNH 2 (BTH follows), DLID of the destination GID
//	        (Config's table), PktLen, SLID of this port
//	BTH     the frame's BTH byte for byte (flags, P_Key, F/B, A, PSN),
//	        except the opcode (TunnelOpcode) and the QP (0x80, 0, the
//	        receive context of the destination QPN: Node.Ctxts[QPN % n])
//	KDETH   KVer 1, no TID (eager), the receiver's JKey; software dwords:
//	        0 the tunnel mark and the frame's BTH opcode, 1 its destination
//	        QPN, 2 its UDP source port, 3 its ICRC
//	payload the frame's extension headers (RETH, AETH, DETH, AtomicETH,
//	        ImmDt…), payload and pad: the eager payload
//
// by PIO when the packet is short and by SDMA (one EAGER request per
// packet, so the driver rewrites nothing) when it is long. On receive it
// rebuilds the frame from the RcvHdrQ entry and the eager payload: the
// Ethernet/IP/UDP headers from the table (source GID by SLID, destination
// this port's GID), the UDP source port and the ICRC the sender carried.
// The rebuilt headers are the ones the ICRC covers, so the engine's ICRC
// check is an end-to-end check of the tunnelled packet.
//
// RC reliability is the engine's: PSNs, ACK/NAK, retransmission and
// RNR handling ride in the carried BTH and AETH. The chip's own
// mechanisms (OPX's reliability protocol, TID flows) are not used.
//
// A Link is owned by one goroutine (an engine worker): it does not
// allocate per packet and never blocks, but in Sleep (the worker's idle
// wait; Wake may come from any goroutine). Transmit buffers are the link's own
// (link.TxFramer): the engine builds each frame in place, and a frame sent
// by SDMA keeps its buffer until its completion is reaped, as the chip
// reads the pages after writev returns on hardware.
package hfilink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softfabric/softfabric/dataplane/link"
	"github.com/softfabric/softfabric/dataplane/wire"
	"github.com/softfabric/softfabric/hfidev"
	"github.com/softfabric/softfabric/hfidev/abi"
)

// Tunnel constants: how a tunnelled RoCE packet is marked.
const (
	// TunnelOpcode is the outer BTH opcode of every packet the link sends:
	// one of the manufacturer-specific opcodes the chip delivers to user
	// contexts. The frame's own opcode travels in KDETH software dword 0.
	TunnelOpcode = 0xf1
	// TunnelMark is KDETH software dword 0's upper half ("SF", version 1).
	TunnelMark = 0x5346_0100
	tunnelMask = 0xffff_ff00
)

// Sizes and defaults.
const (
	// DefaultMTU is the IP MTU of the frames the link carries: a 4096-byte
	// IBTA path MTU with IPv6, UDP, BTH, the largest extension header and
	// the ICRC.
	DefaultMTU = 4096 + wire.IPv6Size + wire.UDPSize + wire.BTHSize + wire.AtomicETHSize + wire.ICRCSize
	// DefaultSDMAMin is the smallest 9B packet (header and payload, in
	// bytes) sent by SDMA: full-MTU data packets go by SDMA, ACKs, requests
	// and small messages by PIO.
	DefaultSDMAMin = 2048
	// DefaultTxBufs is the number of transmit buffers a link owns.
	DefaultTxBufs = 256
)

// Node is a port on the fabric as the link's address table knows it.
type Node struct {
	// LID is the port's LID; GID the RoCE address the engine uses for it
	// (IPv4-mapped or IPv6; every node of a table in one family).
	LID uint16
	GID netip.Addr
	// Ctxts are the port's receive contexts (hardware numbers) that serve
	// queue pairs, in worker order: a packet for QPN q goes to
	// Ctxts[q % len(Ctxts)]. Unused in Config.Self.
	Ctxts []uint16
	// JKey is the job key the port's contexts check; 0 means this
	// context's own (the same job on both sides).
	JKey uint16
}

// Config sets up a Link.
type Config struct {
	Self  Node   // this port: LID and GID
	Peers []Node // the ports frames may be sent to
	// MTU is the IP MTU of the frames; 0 means DefaultMTU.
	MTU int
	// SDMAMin is the smallest 9B packet sent by SDMA; 0 means
	// DefaultSDMAMin, negative never (PIO only). Without SDMA on the
	// context every packet goes by PIO.
	SDMAMin int
	// TxBufs is the number of transmit buffers; 0 means DefaultTxBufs.
	TxBufs int
	// ExpectedMin is the smallest READ or WRITE whose payload the link
	// has the peer's chip place straight into memory (expected.go); 0
	// means DefaultExpectedMin, negative never. At least 32 KiB.
	ExpectedMin int
	// Header16B sends 16B packets (16B LRH, lengths in flits, payloads
	// padded to quadwords) instead of 9B: JKR only, New refuses it on WFR.
	// The link receives both formats either way.
	Header16B bool
	// PollSleep makes an idle Sleep poll the RcvHdrQ instead of blocking
	// on the chip's receive interrupt (sleep.go).
	PollSleep bool
}

// Errors of New.
var (
	ErrConfig = errors.New("hfilink: bad configuration")
)

// Stats count what a link did. Every frame the engine submitted is
// counted once in TxPIO, TxSDMA or one of the Tx drops; every RcvHdrQ
// entry once in RxFrames or one of the Rx drops.
type Stats struct {
	TxPIO, TxSDMA uint64 // frames sent, by path
	TxNoRoute     uint64 // dropped: destination GID not in the table, or source GID not this port's
	TxMalformed   uint64 // dropped: not a RoCEv2 frame the link can carry
	TxErrors      uint64 // dropped: PIO or SDMA refused the packet (Err has the last error)
	TxSDMAErrors  uint64 // SDMA completions with ERROR status (the packet may not have left)
	TxHalts       uint64 // send-context halts recovered with CTXT_RESET
	CreditUpdates uint64 // CREDIT_UPD ioctls for PIO credits
	RxFrames      uint64 // frames handed to the engine
	RxErrors      uint64 // entries with a receive error (eager full, RHF/RHE errors)
	RxForeign     uint64 // not a tunnelled packet, or from an unknown LID
	RxTooLarge    uint64 // rebuilt frame larger than the engine's buffer

	// Expected receive (expected.go).
	Expects          uint64 // expectations programmed and granted
	ExpectFailed     uint64 // expectations TID_UPDATE refused (no entries left)
	ExpectSkipped    uint64 // expectations not taken: as many ranges or buffers expected as the link holds
	SinksExpired     uint64 // programmed ranges freed after SinkLife, not all packets seen
	SinksInvalidated uint64 // ranges ended because the driver invalidated their buffer's entries (memory unmapped)
	GrantsSent       uint64 // grants sent (an expectation asked again sends its grant again)
	GrantsRcvd       uint64 // grants taken from peers
	TxExpected       uint64 // frames sent by SDMA straight into the peer's memory (also in TxSDMA)
	RxPlaced         uint64 // frames handed to the engine with their payload placed (also in RxFrames)
	RxUnplaced       uint64 // expected packets no live range accounts for: dropped
	RxBadPlaced      uint64 // expected packets whose ICRC did not match the placed payload: dropped

	// Driver events (the context's event word, read by Recv).
	Freezes   uint64 // EventFrozen seen: the context reset (CTXT_RESET), its receive queue restarted
	LinkDowns uint64 // EventLinkDown seen and acknowledged
	// EventBits is every event bit seen, ORed (EventTIDMMUNotify
	// included, which TID_INVAL_READ clears; the others are acknowledged
	// with ACK_EVENT).
	EventBits uint64

	// An idle Sleep's work (sleep.go): how often it woke to look.
	SleepWaits uint64 // blocking waits on the chip's interrupt (Context.Wait)
	SleepPolls uint64 // looks at the RcvHdrQ while polling (Config.PollSleep, or after a failed Wait)
}

type counters struct {
	txPIO, txSDMA, txNoRoute, txMalformed, txErrors, txSDMAErrors, txHalts, creditUpdates                    atomic.Uint64
	rxFrames, rxErrors, rxForeign, rxTooLarge                                                                atomic.Uint64
	expects, expectFailed, expectSkipped, sinksExpired, sinksInvalidated, grantsSent, grantsRcvd, txExpected atomic.Uint64
	rxPlaced, rxUnplaced, rxBadPlaced                                                                        atomic.Uint64
	freezes, linkDowns, eventBits                                                                            atomic.Uint64
	sleepWaits, sleepPolls                                                                                   atomic.Uint64
}

// peer is a table entry with its prebuilt receive path (headers of frames
// from it to us).
type peer struct {
	lid   uint16
	addr  [16]byte // GID, 16-byte form
	ctxts []uint16
	jkey  uint16
	rx    wire.Path
}

// Link is the engine's link over one HFI context.
type Link struct {
	ctx  *hfidev.Context
	pio  *hfidev.PIO
	sdma *hfidev.SDMA
	rcv  *hfidev.Receiver
	chip abi.Chip

	selfLID  uint16
	selfAddr [16]byte
	ipv4     bool
	peers    []peer
	maxFrame int
	sdmaMin  int
	credits  uint16

	// Transmit buffers: free stack, the one lent by TxBuf, a FIFO of
	// frames submitted and not yet sent, and the buffer each SDMA slot
	// holds.
	bufs    [][]byte
	lens    []int
	free    []int32
	cur     int32
	queue   []int32
	qhead   int
	qlen    int
	slotBuf []int32

	pkt wire.Packet
	h16 bool                    // Config.Header16B
	hdr [abi.Header16BSize]byte // the header being sent (9B: the first 56 bytes)
	one [1][]byte               // SDMA data iovec

	exp expected // expected receive (expected.go)

	st      counters
	lastErr atomic.Pointer[error]

	// Sleep's (sleep.go). waiting is set while Sleep may block in
	// Context.Wait; pollSleep once Sleep polls instead.
	timer     *time.Timer
	wake      chan struct{}
	waiting   atomic.Bool
	pollSleep bool
}

var (
	_ link.Link     = (*Link)(nil)
	_ link.TxFramer = (*Link)(nil)
)

// New returns a link over c, which it owns from now on (Close closes it).
func New(c *hfidev.Context, cfg Config) (*Link, error) {
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.SDMAMin == 0 {
		cfg.SDMAMin = DefaultSDMAMin
	}
	if cfg.TxBufs == 0 {
		cfg.TxBufs = DefaultTxBufs
	}
	if cfg.ExpectedMin == 0 {
		cfg.ExpectedMin = DefaultExpectedMin
	}
	l := &Link{ctx: c, pio: c.PIO(), sdma: c.SDMA(), rcv: c.Receiver(), chip: c.Chip,
		selfLID: cfg.Self.LID, selfAddr: cfg.Self.GID.As16(), ipv4: cfg.Self.GID.Unmap().Is4(),
		maxFrame: wire.EthernetSize + cfg.MTU, sdmaMin: cfg.SDMAMin, credits: c.Info.Credits, cur: -1, wake: make(chan struct{}, 1)}
	if l.sdma == nil || cfg.SDMAMin < 0 {
		l.sdmaMin = -1
	}
	l.exp.min = cfg.ExpectedMin
	l.h16 = cfg.Header16B
	l.pollSleep = cfg.PollSleep
	if err := l.check(cfg); err != nil {
		return nil, err
	}
	for _, p := range cfg.Peers {
		rx, err := wire.NewPath(wire.PathFields{SrcMAC: MAC(p.LID), DstMAC: MAC(cfg.Self.LID), Src: p.GID, Dst: cfg.Self.GID})
		if err != nil {
			return nil, fmt.Errorf("%w: peer LID %d: %w", ErrConfig, p.LID, err)
		}
		jkey := p.JKey
		if jkey == 0 {
			jkey = c.Base.JKey
		}
		l.peers = append(l.peers, peer{lid: p.LID, addr: p.GID.As16(), ctxts: append([]uint16(nil), p.Ctxts...), jkey: jkey, rx: rx})
	}
	mem := make([]byte, cfg.TxBufs*l.maxFrame)
	l.bufs, l.lens = make([][]byte, cfg.TxBufs), make([]int, cfg.TxBufs)
	l.free, l.queue = make([]int32, 0, cfg.TxBufs), make([]int32, cfg.TxBufs)
	for i := range l.bufs {
		l.bufs[i] = mem[i*l.maxFrame : (i+1)*l.maxFrame : (i+1)*l.maxFrame]
		l.free = append(l.free, int32(cfg.TxBufs-1-i))
	}
	if l.sdma != nil {
		l.slotBuf = make([]int32, c.Info.SDMARingSize)
		for i := range l.slotBuf {
			l.slotBuf[i] = -1
		}
	}
	return l, nil
}

// check validates cfg against the context: the largest packet must fit the
// path it takes, every GID must be of one family, LIDs known once.
func (l *Link) check(cfg Config) error {
	maxData := cfg.MTU - wire.IPv4MinSize - wire.UDPSize - wire.BTHSize - wire.ICRCSize
	if !l.ipv4 {
		maxData = cfg.MTU - wire.IPv6Size - wire.UDPSize - wire.BTHSize - wire.ICRCSize
	}
	// pkt is header and payload (what SDMAMin is compared with), pio what
	// the PBC counts after itself, trailer the ICRC the chip appends (9B)
	// or the tail quadword sent (16B, which pads the payload to quadwords).
	pkt, pio, trailer := abi.Header9BSize+maxData, abi.Header9BSize+maxData, abi.ICRCSize
	if cfg.Header16B {
		pkt = abi.Header16BSize + (maxData+7)&^7
		pio, trailer = pkt+abi.Tail16BSize, abi.Tail16BSize
	}
	switch {
	case cfg.Header16B && l.chip == abi.ChipWFR:
		return fmt.Errorf("%w: 16B packets on WFR (a WFR user context sends and receives 9B only)", ErrConfig)
	case cfg.MTU < 256+wire.IPv6Size+wire.UDPSize+wire.BTHSize+wire.ICRCSize:
		return fmt.Errorf("%w: MTU %d", ErrConfig, cfg.MTU)
	case pio+abi.PBCSize > abi.PBCMaxLengthDWs*4 || pkt+trailer > int(l.ctx.Info.RcvEgrSize):
		return fmt.Errorf("%w: MTU %d makes %d-byte packets: beyond a PBC or an eager buffer", ErrConfig, cfg.MTU, pkt)
	case (l.sdmaMin < 0 || pkt < l.sdmaMin) && abi.PIOBlocks(pio) > int(l.credits):
		return fmt.Errorf("%w: MTU %d makes %d-byte PIO packets; the send context has %d credits", ErrConfig, cfg.MTU, pkt, l.credits)
	case cfg.ExpectedMin > 0 && cfg.ExpectedMin < minExpected:
		return fmt.Errorf("%w: ExpectedMin %d below %d", ErrConfig, cfg.ExpectedMin, minExpected)
	case cfg.TxBufs < 1:
		return fmt.Errorf("%w: %d transmit buffers", ErrConfig, cfg.TxBufs)
	case !cfg.Self.GID.IsValid():
		return fmt.Errorf("%w: no GID for this port", ErrConfig)
	}
	seen := map[uint16]bool{cfg.Self.LID: true}
	for _, p := range cfg.Peers {
		switch {
		case seen[p.LID]:
			return fmt.Errorf("%w: LID %d twice", ErrConfig, p.LID)
		case p.GID.Unmap().Is4() != l.ipv4:
			return fmt.Errorf("%w: peer GID %v and own GID %v of different families", ErrConfig, p.GID, cfg.Self.GID)
		case len(p.Ctxts) == 0:
			return fmt.Errorf("%w: peer LID %d has no receive context", ErrConfig, p.LID)
		}
		seen[p.LID] = true
	}
	return nil
}

// MAC is the Ethernet address the link gives the port of a LID in the
// frames it rebuilds (locally administered: 02:4f:50:41 and the LID).
func MAC(lid uint16) [6]byte { return [6]byte{0x02, 0x4f, 0x50, 0x41, byte(lid >> 8), byte(lid)} }

// MaxFrame is the largest frame carried: Ethernet header and MTU.
func (l *Link) MaxFrame() int { return l.maxFrame }

// Context is the HFI context the link drives.
func (l *Link) Context() *hfidev.Context { return l.ctx }

// Close closes the context. Call it when no goroutine uses the link.
func (l *Link) Close() error { return l.ctx.Close() }

// LastTxError is the last packet PIO or SDMA refused (counted in
// TxErrors), or the last failed reset or acknowledgement of a driver
// event, or the failed wait that made Sleep poll (not counted), nil if
// none.
func (l *Link) LastTxError() error {
	if e := l.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Stats returns the link's counters; safe from any goroutine.
func (l *Link) Stats() Stats {
	s := &l.st
	return Stats{
		TxPIO: s.txPIO.Load(), TxSDMA: s.txSDMA.Load(), TxNoRoute: s.txNoRoute.Load(), TxMalformed: s.txMalformed.Load(),
		TxErrors: s.txErrors.Load(), TxSDMAErrors: s.txSDMAErrors.Load(), TxHalts: s.txHalts.Load(),
		CreditUpdates: s.creditUpdates.Load(), RxFrames: s.rxFrames.Load(), RxErrors: s.rxErrors.Load(),
		RxForeign: s.rxForeign.Load(), RxTooLarge: s.rxTooLarge.Load(),
		Expects: s.expects.Load(), ExpectFailed: s.expectFailed.Load(), ExpectSkipped: s.expectSkipped.Load(), SinksExpired: s.sinksExpired.Load(), SinksInvalidated: s.sinksInvalidated.Load(),
		GrantsSent: s.grantsSent.Load(), GrantsRcvd: s.grantsRcvd.Load(), TxExpected: s.txExpected.Load(),
		RxPlaced: s.rxPlaced.Load(), RxUnplaced: s.rxUnplaced.Load(), RxBadPlaced: s.rxBadPlaced.Load(),
		Freezes: s.freezes.Load(), LinkDowns: s.linkDowns.Load(), EventBits: s.eventBits.Load(),
		SleepWaits: s.sleepWaits.Load(), SleepPolls: s.sleepPolls.Load(),
	}
}

// LinkUp reports whether the port's link is ACTIVE (the driver's status
// page). While it is not, the chip drops what the link sends and RC
// retransmits once it is back.
func (l *Link) LinkUp() bool { return l.ctx.LinkUp() }

// events handles the context's event word ev (nonzero), as PSM does: an
// invalidation (EventTIDMMUNotify) ends the ranges in that buffer; a
// freeze (EventFrozen: on a link down the chip halts the send context and
// disables the receive context) resets the context now, which restarts
// the receive queue and acknowledges the freeze (hfidev.Context.Reset),
// rather than on the next PIO send, so that a link sending only by SDMA
// receives again too; the rest (EventLinkDown, EventLIDChange…) is
// acknowledged and counted. Nothing else is needed: the chip drops what
// is sent while the link is down and RC retransmits. A LID change is not
// followed: peers' tables still hold the old LID.
func (l *Link) events(ev uint64) {
	l.st.eventBits.Or(ev)
	if ev&abi.EventTIDMMUNotify != 0 && l.exp.nsinks > 0 {
		l.invalidated()
	}
	if ev&abi.EventFrozen != 0 {
		l.st.freezes.Add(1)
		if err := l.ctx.Reset(); err != nil {
			l.lastErr.Store(&err)
		}
	}
	if ack := ev & abi.EventMask &^ (abi.EventTIDMMUNotify | abi.EventFrozen); ack != 0 {
		if err := l.ctx.AckEvents(ack); err != nil {
			l.lastErr.Store(&err)
		}
		if ack&abi.EventLinkDown != 0 {
			l.st.linkDowns.Add(1)
		}
	}
}

// kdethQP is the BTH.QP of a packet to this peer for its queue pair qpn:
// the KDETH prefix and the receive context that serves qpn,
// Ctxts[qpn % n].
func (p *peer) kdethQP(qpn uint32) uint32 {
	return abi.KDETHQPPrefix<<16 | uint32(p.ctxts[int(qpn)%len(p.ctxts)]&0xff)
}

func (l *Link) findAddr(a []byte) *peer {
	for i := range l.peers {
		p := &l.peers[i]
		if l.ipv4 && [4]byte(p.addr[12:]) == [4]byte(a) || !l.ipv4 && p.addr == [16]byte(a) {
			return p
		}
	}
	return nil
}

// findLID finds the peer of a received packet's SLID (24 bits in 16B;
// the table's LIDs are 16-bit, so an extended LID matches none).
func (l *Link) findLID(lid uint32) *peer {
	for i := range l.peers {
		if uint32(l.peers[i].lid) == lid {
			return &l.peers[i]
		}
	}
	return nil
}

var (
	le = binary.LittleEndian
	be = binary.BigEndian
)

// Add adds o's counters to s (a device's links together).
func (s *Stats) Add(o Stats) {
	s.TxPIO += o.TxPIO
	s.TxSDMA += o.TxSDMA
	s.TxNoRoute += o.TxNoRoute
	s.TxMalformed += o.TxMalformed
	s.TxErrors += o.TxErrors
	s.TxSDMAErrors += o.TxSDMAErrors
	s.TxHalts += o.TxHalts
	s.CreditUpdates += o.CreditUpdates
	s.RxFrames += o.RxFrames
	s.RxErrors += o.RxErrors
	s.RxForeign += o.RxForeign
	s.RxTooLarge += o.RxTooLarge
	s.Expects += o.Expects
	s.ExpectFailed += o.ExpectFailed
	s.ExpectSkipped += o.ExpectSkipped
	s.SinksExpired += o.SinksExpired
	s.SinksInvalidated += o.SinksInvalidated
	s.GrantsSent += o.GrantsSent
	s.GrantsRcvd += o.GrantsRcvd
	s.TxExpected += o.TxExpected
	s.RxPlaced += o.RxPlaced
	s.RxUnplaced += o.RxUnplaced
	s.RxBadPlaced += o.RxBadPlaced
	s.Freezes += o.Freezes
	s.LinkDowns += o.LinkDowns
	s.EventBits |= o.EventBits
}
