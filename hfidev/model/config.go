package model

import (
	"fmt"

	"github.com/softfabric/softfabric/hfidev/abi"
)

// Config describes a modeled unit. DefaultConfig gives the driver's
// defaults ([K] init.c, user_sdma.c).
type Config struct {
	Chip  abi.Chip
	Unit  int // N of hfi1_N
	Ports int // hfi1 units have 1; assign_ctxt checks the port index

	// FirstUserCtxt is the first receive context user space gets (the
	// driver's first_dyn_alloc_ctxt); UserContexts how many there are.
	FirstUserCtxt int
	UserContexts  int
	// FirstSendCtxt is the hardware send context paired with
	// FirstUserCtxt; the rest follow in order.
	FirstSendCtxt int

	Credits        uint16 // PIO credits per send context
	RcvHdrqCnt     uint16 // entries
	RcvHdrqEntSize uint16 // bytes per entry
	EgrTIDs        uint16 // eager buffers
	RcvEgrSize     uint32 // bytes per eager buffer
	// RcvTIDs is the context's RcvArray share as CTXT_INFO reports it:
	// the eager entries rounded up to a group of 8, then the expected
	// (TID) entries.
	RcvTIDs      uint16
	SDMARingSize uint16 // completion ring entries (0 with SDMA off)
	Caps         uint64 // HFI1_CAP_* reported in runtime_flags
	JKey         uint16
	NumaNode     uint16
	// LID is the port's LID: the model accepts a 9B packet only when its
	// LRH.DLID equals it.
	LID uint16

	// TIDPhysRunPages is how many pages of a buffer TID_UPDATE finds
	// physically contiguous at a time (0: the whole buffer is one run).
	// Each run is cut into power-of-two chunks of at most 2 MiB, one
	// RcvArray entry each.
	TIDPhysRunPages int

	// CreditThreshold is how many freed blocks make the chip write the
	// credit-return word unasked; 0 means the driver's 33% of Credits.
	CreditThreshold int
	// HoldCreditReturns makes the chip write the credit-return word only
	// when made to (CREDIT_UPD, a halt, CTXT_RESET), never for a
	// PBC.CreditReturn request or the threshold: a chip whose credit DMA
	// lags far behind, so that a sender runs out of credits and must force
	// a return. A fault for tests; the chip always honours the request.
	HoldCreditReturns bool
}

func (c *Config) creditThreshold() int {
	if c.CreditThreshold > 0 {
		return c.CreditThreshold
	}
	return max(1, int(c.Credits)*33/100)
}

// DefaultConfig is a unit as the driver sets one up by default: 2048 hdrq
// entries of 32 DW, 8 MiB of eager buffers, an SDMA ring of 128.
func DefaultConfig(c abi.Chip) Config {
	return Config{
		Chip:           c,
		Ports:          1,
		FirstUserCtxt:  3,
		UserContexts:   16,
		FirstSendCtxt:  10,
		Credits:        161,
		RcvHdrqCnt:     2048,
		RcvHdrqEntSize: 32 * 4,
		EgrTIDs:        256,
		RcvEgrSize:     32 << 10,
		RcvTIDs:        2048,
		SDMARingSize:   128,
		Caps:           abi.CapSDMA | abi.CapMultiPktEgr,
		JKey:           0x8123,
		LID:            1,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Chip != abi.ChipWFR && c.Chip != abi.ChipJKR:
		return fmt.Errorf("model: chip %v not modeled", c.Chip)
	case c.Ports < 1:
		return fmt.Errorf("model: %d ports", c.Ports)
	case c.UserContexts < 1 || c.FirstUserCtxt < 0 || c.FirstUserCtxt+c.UserContexts > 256:
		// Tokens carry 8 bits of context: the driver's own limit for mmap.
		return fmt.Errorf("model: user contexts %d..%d do not fit a token's 8-bit ctxt",
			c.FirstUserCtxt, c.FirstUserCtxt+c.UserContexts-1)
	case c.FirstSendCtxt < 0 || c.FirstSendCtxt+c.UserContexts > 256:
		return fmt.Errorf("model: send contexts from %d do not fit", c.FirstSendCtxt)
	case c.Credits == 0 || int(c.Credits)*abi.PIOBlockSize > 64<<10:
		// A send context owns at most 64 KiB of PIO space.
		return fmt.Errorf("model: %d credits", c.Credits)
	case c.RcvHdrqCnt == 0 || c.RcvHdrqEntSize == 0 || c.RcvHdrqEntSize%8 != 0:
		return fmt.Errorf("model: hdrq %d×%d B", c.RcvHdrqCnt, c.RcvHdrqEntSize)
	case c.EgrTIDs == 0 || c.RcvEgrSize == 0 || c.RcvEgrSize%abi.PageSize != 0:
		return fmt.Errorf("model: eager %d×%d B (buffers are whole pages)", c.EgrTIDs, c.RcvEgrSize)
	case (c.Caps&abi.CapSDMA != 0) != (c.SDMARingSize != 0):
		return fmt.Errorf("model: SDMA cap and ring size %d disagree", c.SDMARingSize)
	case c.RcvHdrqCnt%abi.RcvSeqLast == 0:
		// The entry at the head would carry the expected sequence number
		// from one lap before: RcvSeq could not tell new from stale.
		return fmt.Errorf("model: %d hdrq entries, a multiple of %d", c.RcvHdrqCnt, abi.RcvSeqLast)
	case int(c.RcvHdrqEntSize) < abi.HdrqOffset9B*4+abi.Header9BSize+abi.RHFSize:
		return fmt.Errorf("model: %d-byte hdrq entries cannot hold a 9B header and the RHF", c.RcvHdrqEntSize)
	case int(c.RcvEgrSize) < min(int(c.Credits)*abi.PIOBlockSize, abi.PBCMaxLengthDWs*4):
		// An eager buffer must hold the largest packet the sender can make.
		return fmt.Errorf("model: %d-byte eager buffers are smaller than a PIO packet", c.RcvEgrSize)
	case c.TIDPhysRunPages < 0:
		return fmt.Errorf("model: TIDPhysRunPages %d", c.TIDPhysRunPages)
	case c.Caps&(abi.CapNoDropRHQFull|abi.CapNoDropEgrFull) != 0:
		return fmt.Errorf("model: NODROP_RHQ_FULL/NODROP_EGR_FULL: %w", ErrNotModeled)
	}
	return nil
}
