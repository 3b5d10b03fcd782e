package fabric

import (
	"encoding/binary"
	"fmt"

	"github.com/softfabric/softfabric/dataplane/mr"
	"github.com/softfabric/softfabric/dataplane/verbs"
	"github.com/softfabric/softfabric/fabric/internal/amo"
)

// AtomicOp is a libfabric atomic operation (numbered as fi_op).
type AtomicOp uint8

// Atomic operations.
const (
	AtomicMin AtomicOp = iota
	AtomicMax
	AtomicSum
	AtomicProd
	AtomicLOr
	AtomicLAnd
	AtomicBOr
	AtomicBAnd
	AtomicLXor
	AtomicBXor
	AtomicRead
	AtomicWrite
	AtomicCSwap
	AtomicCSwapNE
	AtomicCSwapLE
	AtomicCSwapLT
	AtomicCSwapGE
	AtomicCSwapGT
	AtomicMSwap
	NumAtomicOps
)

func (o AtomicOp) String() string { return amo.Op(o).String() }

// Datatype is the type of an atomic's elements (numbered as fi_datatype).
type Datatype uint8

// Datatypes. LongDouble and LongDoubleComplex are not supported.
const (
	Int8 Datatype = iota
	Uint8
	Int16
	Uint16
	Int32
	Uint32
	Int64
	Uint64
	Float
	Double
	FloatComplex
	DoubleComplex
	LongDouble
	LongDoubleComplex
	NumDatatypes
)

func (t Datatype) String() string { return amo.Datatype(t).String() }

// Size is the size of one element in bytes (0: unsupported).
func (t Datatype) Size() int { return amo.Datatype(t).Size() }

// AtomicKind is the form of an atomic: Base (Atomic: no result), Fetch
// (FetchAtomic: the old value comes back), Compare (CompareAtomic:
// compare-and-swap family).
type AtomicKind uint8

// Atomic kinds.
const (
	AtomicBase AtomicKind = iota
	AtomicFetch
	AtomicCompare
)

// AtomicValid says whether the endpoint can execute op on datatype t in
// kind k, how many elements one operation may carry, and whether it goes
// on the wire as an RDMA atomic (native: 64-bit fetch-add and
// compare-and-swap of one element, executed by the target's transport,
// so that it is atomic with other RDMA atomics from any peer) or is
// executed at the target by the provider, in arrival order (as
// libfabric's RxM does: atomic against other provider-executed atomics of
// that endpoint, not against native ones or the target's own CPU writes).
// MSG endpoints do native atomics only.
func (ep *Endpoint) AtomicValid(op AtomicOp, t Datatype, k AtomicKind) (count int, native bool, err error) {
	if ep.info.Caps&CapAtomic == 0 {
		return 0, false, ErrNotSupported
	}
	n, ok := amo.Valid(amo.Op(op), amo.Datatype(t), amo.Kind(k))
	if !ok {
		return 0, false, ErrNotSupported
	}
	if nativeOp(op, t, k) {
		if ep.typ != EPRDM {
			return 1, true, nil
		}
	} else if ep.typ != EPRDM {
		return 0, false, ErrNotSupported
	}
	// Operand and compare travel in one eager message.
	return min(n, (RDMEagerSize/2)/t.Size()), false, nil
}

// nativeOp reports the atomics that RDMA does on the wire.
func nativeOp(op AtomicOp, t Datatype, k AtomicKind) bool {
	if t != Int64 && t != Uint64 {
		return false
	}
	switch k {
	case AtomicBase:
		return op == AtomicSum
	case AtomicFetch:
		return op == AtomicSum || op == AtomicRead
	case AtomicCompare:
		return op == AtomicCSwap
	}
	return false
}

// Atomic applies op to the peer's elements at raddr (under key) with the
// operand elements in b.
func (ep *Endpoint) Atomic(op AtomicOp, t Datatype, b []byte, desc Desc, dst Addr, raddr, key, ctx uint64) error {
	return ep.atomic(op, t, AtomicBase, b, desc, nil, Desc{}, nil, Desc{}, dst, raddr, key, ctx)
}

// FetchAtomic is Atomic, and the elements' old values land in result.
func (ep *Endpoint) FetchAtomic(op AtomicOp, t Datatype, b []byte, desc Desc, result []byte, rdesc Desc, dst Addr, raddr, key, ctx uint64) error {
	return ep.atomic(op, t, AtomicFetch, b, desc, nil, Desc{}, result, rdesc, dst, raddr, key, ctx)
}

// CompareAtomic applies a compare-and-swap family op (compare holds the
// compare elements, b the swap values) and returns the old values in
// result.
func (ep *Endpoint) CompareAtomic(op AtomicOp, t Datatype, b []byte, desc Desc, compare []byte, cdesc Desc,
	result []byte, rdesc Desc, dst Addr, raddr, key, ctx uint64) error {
	return ep.atomic(op, t, AtomicCompare, b, desc, compare, cdesc, result, rdesc, dst, raddr, key, ctx)
}

func (ep *Endpoint) atomic(op AtomicOp, t Datatype, k AtomicKind, b []byte, desc Desc, cmp []byte, cdesc Desc,
	res []byte, rdesc Desc, dst Addr, raddr, key, ctx uint64) error {
	count, native, err := ep.AtomicValid(op, t, k)
	if err != nil {
		return err
	}
	size := t.Size()
	n := len(b)
	if op == AtomicRead {
		n = len(res)
	}
	if n == 0 || n%size != 0 || n/size > count || key > 0xffffffff ||
		k != AtomicBase && len(res) != n || k == AtomicCompare && len(cmp) != n || op != AtomicRead && len(b) != n {
		return fmt.Errorf("%w: atomic %v on %v: buffer sizes", ErrInvalid, op, t)
	}
	if nativeOp(op, t, k) && n == size {
		native = true
	}
	o, seq, err := ep.beginTx()
	if err != nil {
		return err
	}
	if err := ep.checkDest(dst); err != nil {
		return ep.abortTx(err)
	}
	o.ctx, o.dest, o.raddr, o.rkey = ctx, dst, raddr, uint32(key)
	o.report = ep.report(0)
	o.flags = FlagAtomic | FlagWrite
	if k != AtomicBase {
		o.flags = FlagAtomic | FlagRead
	}
	o.cntr = ep.cntWrite
	if native {
		err = ep.fillNativeAtomic(o, seq, op, k, b, desc, cmp, res, rdesc)
	} else {
		err = ep.fillSoftAtomic(o, op, t, k, b, desc, cmp, cdesc, res, rdesc)
	}
	if err != nil {
		return ep.abortTx(err)
	}
	ep.commitTx(seq)
	return nil
}

// fillNativeAtomic describes an RDMA atomic: the operands travel in the
// request, the old value comes back into result (or the slot's scratch
// area for a base atomic).
func (ep *Endpoint) fillNativeAtomic(o *txOp, seq uint64, op AtomicOp, k AtomicKind, b []byte, desc Desc, cmp, res []byte, rdesc Desc) error {
	if o.raddr&7 != 0 {
		return fmt.Errorf("%w: a native atomic's remote address must be 8-aligned", ErrInvalid)
	}
	switch op {
	case AtomicSum:
		o.op, o.cmp = verbs.OpFetchAdd, binary.LittleEndian.Uint64(b)
	case AtomicRead:
		o.op, o.cmp = verbs.OpFetchAdd, 0
	case AtomicCSwap:
		o.op, o.cmp, o.swap = verbs.OpCmpSwap, binary.LittleEndian.Uint64(cmp), binary.LittleEndian.Uint64(b)
	}
	if k == AtomicBase {
		off := int(seq&ep.tx.mask)*slotArea + slotInject
		o.sgl[0] = mr.SGE{Addr: ep.injectMR.Addr() + uint64(off), Length: 8, LKey: ep.injectMR.LKey()}
		o.nsge = 1
		return nil
	}
	return gather(&o.sgl, &o.nsge, [][]byte{res}, []Desc{rdesc}, 1)
}
