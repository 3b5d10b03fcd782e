package fabric

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softfabric/softfabric/dataplane/rc"
)

// QPInfo is what tools of the rdma-core family (perftest, ibv_*_pingpong)
// exchange about a queue pair out of band, instead of a connection
// request: softfabric's extension for talking to them.
type QPInfo struct {
	GID netip.Addr
	QPN uint32
	PSN uint32
}

// QPOptions tune a connection made with ConnectQP; zero values take the
// defaults (path MTU: the largest the link allows; 16 outstanding reads
// and atomics each way; timeout 14, 67 ms; 7 retries; 7 RNR retries,
// forever).
type QPOptions struct {
	PathMTU     int
	RdAtomic    uint8
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	// FlowLabel is the path's flow label, which the UDP source port
	// derives from (0: the QPN pair's, as Linux uses when none is set).
	FlowLabel uint32
}

// QPInfo describes the endpoint's queue pair (MSG: its RC queue pair and
// first PSN; DGRAM: its UD queue pair). Valid once enabled.
func (ep *Endpoint) QPInfo() QPInfo {
	gid, _ := ep.d.dev.GID(ep.info.Src)
	if ep.qp == nil {
		return QPInfo{GID: gid}
	}
	return QPInfo{GID: gid, QPN: ep.qp.QPN(), PSN: ep.psn}
}

// ConnectQP connects an enabled MSG endpoint straight to a peer's queue
// pair whose facts came out of band (QPInfo): no connection request, no
// EQ events. Both sides must do it.
func (ep *Endpoint) ConnectQP(ctx context.Context, peer QPInfo, o QPOptions) error {
	if ep.typ != EPMsg {
		return fmt.Errorf("connecting a queue pair: %w: a %v endpoint", ErrNotSupported, ep.typ)
	}
	if ep.state.Load() != epEnabled {
		return fmt.Errorf("connecting a queue pair: %w: enable a fresh endpoint first", ErrInvalid)
	}
	if err := ep.connectRC(ctx, peer, o); err != nil {
		return fmt.Errorf("connecting a queue pair: %w", err)
	}
	ep.connected()
	return nil
}

// Option names an endpoint option (SetOption, GetOption).
type Option int

// Options.
const (
	// OptMinMultiRecv: a multi-receive buffer is released once less
	// than this many bytes remain (default: the largest message).
	OptMinMultiRecv Option = iota + 1
	// OptCMDataSize: the most private data a connection carries (read
	// only: MaxCMData).
	OptCMDataSize
	// OptQKey: the Q_Key of a DGRAM endpoint and its sends, for peers that
	// use another (ibv_ud_pingpong's 0x11111111). Set before Enable.
	OptQKey
	// OptMaxMsgSize: the largest message (read only).
	OptMaxMsgSize
	// OptWorker: the domain worker (queue) that serves the endpoint,
	// 0 to Domain.Queues()-1. Set before Enable; the default is round
	// robin in opening order (Endpoint.Worker), and an endpoint bound to a
	// shared receive context takes the context's.
	OptWorker
	// OptTimeout: the local ACK timeout of a MSG endpoint's RC queue pair,
	// as IBTA encodes it (4.096 µs × 2^v, 1 to 31; default 14, 67 ms):
	// how long a request waits for its answer before it is sent again
	// (rdma_cm's RDMA_OPTION_ID_ACK_TIMEOUT). Set before Connect or Accept.
	OptTimeout
	// OptRetryCount: how many times a MSG endpoint's request is sent again
	// before it fails with ErrTimedOut (1 to 7; default 7; rdma_cm's
	// retry_count). Set before Connect or Accept.
	OptRetryCount
	// OptCM: the connection manager a MSG endpoint's Connect speaks:
	// CMRDMA (the default) or CMTCP. A passive endpoint answers both.
	// Set before Connect.
	OptCM
)

// SetOption sets an endpoint option.
func (ep *Endpoint) SetOption(o Option, v int) error {
	switch o {
	case OptMinMultiRecv:
		if v < 0 {
			return fmt.Errorf("setting the minimum multi-receive space: %w: %d", ErrInvalid, v)
		}
		ep.minMultiRecv = v
	case OptQKey:
		if ep.typ != EPDgram {
			return fmt.Errorf("setting a Q_Key: %w: a %v endpoint", ErrNotSupported, ep.typ)
		}
		if ep.state.Load() != epCreated || v < 0 || v > 0xffffffff {
			return fmt.Errorf("setting a Q_Key: %w", ErrInvalid)
		}
		ep.qkey = uint32(v)
	case OptWorker:
		if ep.state.Load() != epCreated || ep.srx != nil || v < 0 || v >= len(ep.d.workers) {
			return fmt.Errorf("setting the worker: %w: %d", ErrInvalid, v)
		}
		ep.w = ep.d.workers[v]
	case OptTimeout, OptRetryCount:
		if ep.typ != EPMsg {
			return fmt.Errorf("setting option %d: %w: a %v endpoint", o, ErrNotSupported, ep.typ)
		}
		if v < 1 || o == OptTimeout && v > 31 || o == OptRetryCount && v > 7 || ep.state.Load() > epEnabled {
			return fmt.Errorf("setting option %d: %w: %d", o, ErrInvalid, v)
		}
		if o == OptTimeout {
			ep.rcOpts.Timeout = uint8(v)
		} else {
			ep.rcOpts.RetryCnt = uint8(v)
		}
	case OptCM:
		if ep.typ != EPMsg {
			return fmt.Errorf("setting the connection manager: %w: a %v endpoint", ErrNotSupported, ep.typ)
		}
		if v != CMRDMA && v != CMTCP || ep.state.Load() > epEnabled || ep.conn != nil {
			return fmt.Errorf("setting the connection manager: %w: %d", ErrInvalid, v)
		}
		ep.cmKind = v
	case OptCMDataSize, OptMaxMsgSize:
		return fmt.Errorf("setting option %d: %w: read only", o, ErrInvalid)
	default:
		return fmt.Errorf("setting option %d: %w", o, ErrNotSupported)
	}
	return nil
}

// GetOption reads an endpoint option.
func (ep *Endpoint) GetOption(o Option) (int, error) {
	switch o {
	case OptMinMultiRecv:
		return ep.minMultiRecv, nil
	case OptCMDataSize:
		return MaxCMData, nil
	case OptCM:
		return ep.cmKind, nil
	case OptQKey:
		if ep.typ != EPDgram {
			return 0, ErrNotSupported
		}
		return int(ep.qkey), nil
	case OptMaxMsgSize:
		return ep.info.EP.MaxMsgSize, nil
	case OptWorker:
		return ep.w.id, nil
	case OptTimeout:
		if ep.rcOpts.Timeout == 0 {
			return 14, nil
		}
		return int(ep.rcOpts.Timeout), nil
	case OptRetryCount:
		if ep.rcOpts.RetryCnt == 0 {
			return 7, nil
		}
		return int(ep.rcOpts.RetryCnt), nil
	}
	return 0, fmt.Errorf("reading option %d: %w", o, ErrNotSupported)
}

// TransportStats count what an endpoint's queue pairs saw and did.
type TransportStats struct {
	TxPackets, RxPackets uint64
	Retransmits          uint64
	Timeouts             uint64
	LateTimeouts         uint64 // of Timeouts, noticed over a timeout late: no retry spent
	Probes               uint64
	SeqNAKs, RNRNAKs     uint64 // received
	Dropped              uint64
}

// Stats returns the transport counters of the endpoint's queue pairs.
func (ep *Endpoint) Stats() TransportStats {
	var s TransportStats
	if ep.state.Load() == epCreated || ep.state.Load() == epClosed {
		return s
	}
	_ = ep.d.exec(ep.w, func() error {
		if ep.rcqp != nil {
			addRC(&s, ep.rcqp.Stats())
		}
		if ep.udqp != nil {
			u := ep.udqp.Stats()
			s.TxPackets += u.TxPackets
			s.RxPackets += u.RxPackets
			s.Dropped += u.Dropped + u.NoRecv + u.QKeyViolations
		}
		ep.rdmStats(&s)
		return nil
	})
	return s
}

// WorkerStats are one domain worker's frame counters.
type WorkerStats struct {
	RxFrames, TxFrames  uint64
	HandedOff, HandedIn uint64
	HandoffDrops        uint64
	Malformed, BadICRC  uint64
	UnknownQP           uint64
}

// WorkerStats returns each worker's counters, read on the worker.
func (d *Domain) WorkerStats() []WorkerStats {
	out := make([]WorkerStats, len(d.workers))
	for i, w := range d.workers {
		_ = d.exec(w, func() error {
			s := d.dev.WorkerStat(i)
			out[i] = WorkerStats{RxFrames: s.RxFrames, TxFrames: s.TxFrames, HandedOff: s.HandedOff, HandedIn: s.HandedIn, HandoffDrops: s.HandoffDrops,
				Malformed: s.Malformed, BadICRC: s.BadICRC, UnknownQP: s.UnknownQP}
			return nil
		})
	}
	return out
}

func addRC(s *TransportStats, r rc.Stats) {
	s.TxPackets += r.TxPackets
	s.RxPackets += r.RxPackets
	s.Retransmits += r.Retransmits
	s.Timeouts += r.Timeouts
	s.LateTimeouts += r.LateTimeouts
	s.Probes += r.Probes
	s.SeqNAKs += r.SeqNAKsRcvd
	s.RNRNAKs += r.RNRNAKsRcvd
	s.Dropped += r.Dropped
}
