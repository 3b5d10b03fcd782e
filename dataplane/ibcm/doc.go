// Package ibcm is an InfiniBand Communication Manager agent: the connection
// handshake of IBTA Vol. 1 chapter 12 as Linux's kernel CM
// (drivers/infiniband/core/cm.c) and rdma_cm (drivers/infiniband/core/cma.c)
// run it over RoCEv2, so that rping, ib_write_bw -R or ucmatose on a Linux
// rxe or RoCE NIC can connect to us and we to them.
//
// The Agent is a pure state machine: no goroutines, locks, syscalls or clock
// reads. The caller serialises every call, passes the time as int64
// nanoseconds of a monotonic clock, delivers received MADs to Receive, runs
// Tick when Next says a timer is due, transmits what the Send callback hands
// it (256-byte MADs to the peer's GSI, QP1, Q_Key 0x80010000 on RoCE; the
// buffer is the agent's and must be copied before Send returns) and hears of
// connections through the Event callback. Event handlers may call the
// Agent's methods (typically Accept or SendRTU); Send must not.
//
// Active side: Connect sends a REQ and retransmits it until a REP, REJ or
// timeout; an MRA stretches the wait. A REP raises EventReply; the caller
// brings its QP to RTS and calls SendRTU (or Reject). Passive side: Listen
// on a service ID; a REQ for it raises EventRequest and the caller answers
// with Accept (REP, retransmitted until RTU), Reject or SendMRA. RTU, or the
// caller's Established when the QP sees data first, raises EventEstablished.
// Disconnect sends a DREQ; a received DREQ is answered with a DREP at once.
// Both ends then spend Config.TimeWait in TimeWait, answering late
// duplicates, before the ID is freed (EventTimeWaitExit).
//
// Every state that waits on the peer ends in bounded time: retransmissions
// stop after MaxCMRetries (about 87 s for a REQ with the defaults; an MRA
// stretches each wait to at most Config.MaxMRAWait), and states that wait
// on the local caller expire when the peer itself would have given up
// (Config.ActionTimeout). Only established connections live on until
// disconnected: a peer that vanishes then is the QP's to notice. A flood of
// REQs costs at most a listener's backlog of state.
//
// Timing: we advertise rdma_cm's values (CM response timeouts 20, 15 CM
// retries, packet life time 18), so kernel peers time us exactly as they
// time each other, but retransmit on our own, shorter schedule: 1 s, then
// doubling up to the wait the kernel would use (6.144 s for REQs, the REQ's
// local CM response timeout, 4.096 s from rdma_cm, for REPs and DREQs of
// accepted connections). Duplicates this may cause are harmless to the
// kernel's state machine.
//
// Duplicates are handled as cm.c does: a duplicate REQ (same remote comm ID
// and CA GUID, cm_match_req) never makes a second connection; it is ignored
// while the request is pending, answered with the MRA if one was sent, and
// answered with a REJ (stale connection) in TimeWait. Unlike cm.c, which
// leaves lost REPs to its REP timer, a duplicate REQ after our REP also
// resends the REP. A duplicate REP after RTU resends the RTU; a duplicate
// DREQ in TimeWait resends the DREP; a DREQ for an unknown ID gets a DREP
// (cm_issue_drep). A REQ or REP from a QP that already has a live
// connection (same remote QPN and CA GUID) is rejected as stale and the old
// connection is disconnected.
//
// Transaction IDs follow cm.c: REQ and DREQ carry a fresh random TID;
// REP, RTU, MRA, REJ and DREP reuse the TID of the REQ that opened the
// connection, or of the DREQ being answered; SIDR_REQs carry a fresh
// random TID, and REJs, DREPs and SIDR_REPs without state, and every
// SIDR_REP, echo the TID of what they answer. CM messages use method Send,
// so TIDs are informational: the MAD layer matches TIDs only for responses
// to Get and Set.
//
// Not implemented: LAP and APR (alternate paths and path migration, which
// Linux does not support on RoCE either) are counted and dropped, as are
// alternate paths in REQs (parsed and reported, never used); service ID
// masks; peer-to-peer connections; ClassPortInfo and CM redirection.
//
// Service ID resolution (SIDR, for rdma_cm's UD port space): ResolveSIDR
// sends a SIDR_REQ, retransmitted until the SIDR_REP (EventSIDRReply) or
// the last retry (EventTimeout). A SIDR_REQ for a listened service raises
// EventSIDRRequest and the caller answers with SIDRReply; one for any
// other service gets status Unsupported, as from the kernel. A duplicate
// SIDR_REQ is ignored while its request is pending and answered with the
// same SIDR_REP for Config.SIDRHold after (cm.c forgets it, and would
// report it again). The SIDR_REQ's request ID is the requester's ID, so
// a daemon routes SIDR_REPs as it routes replies.
package ibcm
