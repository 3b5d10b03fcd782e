// Package amo executes libfabric's atomic operations on byte buffers: every op
// and datatype libfabric defines that softfabric supports, applied at the
// target in arrival order by the provider.
//
// The provider executes atomics in software at the target, as libfabric's RxM
// does: the initiator's request names an op, a datatype and a kind (base,
// fetch or compare), and the target calls [Apply] on the registered memory.
// [Valid] is the table behind fi_atomicvalid, fi_fetch_atomicvalid and
// fi_compare_atomicvalid. Elements are little-endian, the host order of the
// amd64 and arm64 machines softfabric runs on.
//
// Apply is not atomic with respect to other goroutines touching the same
// memory: the provider serialises operations on a target itself.
package amo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// Op is an atomic operation, numbered exactly as libfabric's enum fi_op.
type Op uint8

// The operations, in the order of libfabric's enum fi_op (FI_MIN = 0 ...
// FI_MSWAP = 18).
const (
	Min         Op = iota // FI_MIN: dst = min(dst, operand)
	Max                   // FI_MAX: dst = max(dst, operand)
	Sum                   // FI_SUM: dst += operand
	Prod                  // FI_PROD: dst *= operand
	LOr                   // FI_LOR: dst = dst || operand, as 0 or 1
	LAnd                  // FI_LAND: dst = dst && operand, as 0 or 1
	BOr                   // FI_BOR: dst |= operand
	BAnd                  // FI_BAND: dst &= operand
	LXor                  // FI_LXOR: dst = (dst != 0) != (operand != 0), as 0 or 1
	BXor                  // FI_BXOR: dst ^= operand
	AtomicRead            // FI_ATOMIC_READ: result = dst (fetch kind only)
	AtomicWrite           // FI_ATOMIC_WRITE: dst = operand
	CSwap                 // FI_CSWAP: if compare == dst { dst = operand }
	CSwapNE               // FI_CSWAP_NE: if compare != dst { dst = operand }
	CSwapLE               // FI_CSWAP_LE: if compare <= dst { dst = operand }
	CSwapLT               // FI_CSWAP_LT: if compare < dst { dst = operand }
	CSwapGE               // FI_CSWAP_GE: if compare >= dst { dst = operand }
	CSwapGT               // FI_CSWAP_GT: if compare > dst { dst = operand }
	MSwap                 // FI_MSWAP: dst = operand&compare | dst&^compare
	numOps
)

var opNames = [numOps]string{
	"min", "max", "sum", "prod", "lor", "land", "bor", "band", "lxor", "bxor",
	"atomic_read", "atomic_write", "cswap", "cswap_ne", "cswap_le",
	"cswap_lt", "cswap_ge", "cswap_gt", "mswap",
}

// String returns the op's short lowercase name ("min", "cswap_ne", ...), or
// "op(N)" for a number libfabric does not define.
func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Datatype is an element type, numbered exactly as libfabric's enum
// fi_datatype up to FI_LONG_DOUBLE_COMPLEX.
type Datatype uint8

// The datatypes, in the order of libfabric's enum fi_datatype (FI_INT8 = 0 ...
// FI_LONG_DOUBLE_COMPLEX = 13).
const (
	Int8              Datatype = iota // FI_INT8
	Uint8                             // FI_UINT8
	Int16                             // FI_INT16
	Uint16                            // FI_UINT16
	Int32                             // FI_INT32
	Uint32                            // FI_UINT32
	Int64                             // FI_INT64
	Uint64                            // FI_UINT64
	Float                             // FI_FLOAT: IEEE 754 binary32
	Double                            // FI_DOUBLE: IEEE 754 binary64
	FloatComplex                      // FI_FLOAT_COMPLEX: two binary32, real then imaginary
	DoubleComplex                     // FI_DOUBLE_COMPLEX: two binary64, real then imaginary
	LongDouble                        // FI_LONG_DOUBLE: not supported
	LongDoubleComplex                 // FI_LONG_DOUBLE_COMPLEX: not supported
	numTypes
)

var typeNames = [numTypes]string{
	"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
	"float", "double", "float_complex", "double_complex", "long_double",
	"long_double_complex",
}

var typeSizes = [numTypes]uint8{1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 0, 0}

// String returns the datatype's short lowercase name ("int8",
// "double_complex", ...), or "datatype(N)" for a number libfabric does not
// define.
func (t Datatype) String() string {
	if t < numTypes {
		return typeNames[t]
	}
	return "datatype(" + strconv.Itoa(int(t)) + ")"
}

// Size returns the bytes per element, or 0 for a datatype softfabric does not
// support (LongDouble, LongDoubleComplex, and numbers beyond them).
func (t Datatype) Size() int {
	if t < numTypes {
		return int(typeSizes[t])
	}
	return 0
}

// Kind classifies an atomic call, as libfabric's three families of atomic
// functions do.
type Kind uint8

// The kinds.
const (
	Base    Kind = iota // fi_atomic: dst op= operand
	Fetch               // fi_fetch_atomic: as Base, and returns the old value
	Compare             // fi_compare_atomic: takes a compare buffer, returns the old value
)

// The errors Apply returns.
var (
	// ErrNotSupported: the op is not valid for the datatype and kind.
	ErrNotSupported = errors.New("amo: operation not supported for this datatype")
	// ErrLength: a buffer length does not match the others or the element
	// size, or the operation carries more than the count Valid allows.
	ErrLength = errors.New("amo: buffer length does not match the datatype")
)

// maxBytes bounds the data of one operation; Valid's count is maxBytes over
// the element size.
const maxBytes = 64 << 10

type class uint8

const (
	integer class = iota
	floating
	cmplx
)

func (t Datatype) class() class {
	switch {
	case t <= Uint64:
		return integer
	case t <= Double:
		return floating
	}
	return cmplx
}

// Valid reports whether op on datatype t is supported in kind k and, if so,
// the most elements one operation may carry (64 KiB over the element size).
// Unsupported combinations return 0, false.
//
// The rules: Base kind takes Min, Max, Sum, Prod, the logical and bitwise ops
// and AtomicWrite; Fetch kind takes those and AtomicRead; Compare kind takes
// exactly CSwap, CSwapNE, CSwapLE, CSwapLT, CSwapGE, CSwapGT and MSwap. The
// logical and bitwise ops and MSwap are for integer types only; Min, Max and
// the ordered compares (CSwapLE, CSwapLT, CSwapGE, CSwapGT) are not for
// complex types. LongDouble and LongDoubleComplex are not supported.
func Valid(op Op, t Datatype, k Kind) (count int, ok bool) {
	size := t.Size()
	if size == 0 || k > Compare {
		return 0, false
	}
	c := t.class()
	switch op {
	case Min, Max:
		ok = k != Compare && c != cmplx
	case Sum, Prod, AtomicWrite:
		ok = k != Compare
	case LOr, LAnd, LXor, BOr, BAnd, BXor:
		ok = k != Compare && c == integer
	case AtomicRead:
		ok = k == Fetch
	case CSwap, CSwapNE:
		ok = k == Compare
	case CSwapLE, CSwapLT, CSwapGE, CSwapGT:
		ok = k == Compare && c != cmplx
	case MSwap:
		ok = k == Compare && c == integer
	}
	if !ok {
		return 0, false
	}
	return maxBytes / size, true
}

// Apply executes one atomic operation over the len(dst)/t.Size() elements of
// dst, the target memory, elementwise and in order.
//
// operand is the source, len(dst) bytes (ignored for AtomicRead). compare is
// the compare buffer, len(dst) bytes, for the Compare kind; it must be empty
// for the other kinds (for MSwap it is the mask). result, when not nil,
// receives the old contents of dst, len(dst) bytes. result must not overlap
// dst, operand or compare. An empty dst is a no-op.
//
// Integer arithmetic wraps. Min and Max on floats keep dst when either value
// is NaN (dst = operand only if operand < dst, resp. operand > dst, as
// libfabric does). CSwap compares the bytes of each element, as libfabric's
// default (compiler built-in atomics) build and RDMA hardware do, and CSwapNE
// is its exact negation: for floats a NaN matches itself and +0 does not
// match -0, so a compare-and-swap loop always ends. The ordered compares use
// IEEE ordering.
// Elements an op leaves unchanged are not written.
//
// Apply returns ErrNotSupported when Valid(op, t, k) does not hold, and
// ErrLength when the lengths do not fit; it then changes nothing. It does
// not allocate.
func Apply(op Op, t Datatype, k Kind, dst, operand, compare, result []byte) error {
	if _, ok := Valid(op, t, k); !ok {
		return ErrNotSupported
	}
	n := len(dst)
	switch {
	case n%t.Size() != 0 || n > maxBytes:
		return ErrLength
	case op != AtomicRead && len(operand) != n:
		return ErrLength
	case k == Compare && len(compare) != n, k != Compare && len(compare) != 0:
		return ErrLength
	case result != nil && len(result) != n:
		return ErrLength
	}
	if result != nil {
		copy(result, dst)
	}

	switch op {
	case AtomicRead:
		return nil
	case AtomicWrite:
		copy(dst, operand)
		return nil
	case CSwap, CSwapNE:
		swapIfEqual(op == CSwap, t.Size(), dst, operand, compare)
		return nil
	}

	switch t {
	case Int8:
		applyInt[int8](op, 1, dst, operand, compare)
	case Uint8:
		applyInt[uint8](op, 1, dst, operand, compare)
	case Int16:
		applyInt[int16](op, 2, dst, operand, compare)
	case Uint16:
		applyInt[uint16](op, 2, dst, operand, compare)
	case Int32:
		applyInt[int32](op, 4, dst, operand, compare)
	case Uint32:
		applyInt[uint32](op, 4, dst, operand, compare)
	case Int64:
		applyInt[int64](op, 8, dst, operand, compare)
	case Uint64:
		applyInt[uint64](op, 8, dst, operand, compare)
	case Float:
		applyFloat[float32](op, 4, dst, operand, compare)
	case Double:
		applyFloat[float64](op, 8, dst, operand, compare)
	case FloatComplex:
		applyComplex[complex64](op, 4, dst, operand)
	case DoubleComplex:
		applyComplex[complex128](op, 8, dst, operand)
	}
	return nil
}

// swapIfEqual implements CSwap (eq) and CSwapNE (!eq) for every datatype: it
// copies an operand element over dst where the dst and compare bytes are
// (not) the same.
func swapIfEqual(eq bool, size int, dst, operand, compare []byte) {
	for i := 0; i < len(dst); i += size {
		if bytes.Equal(dst[i:i+size], compare[i:i+size]) == eq {
			copy(dst[i:i+size], operand[i:i+size])
		}
	}
}

type integers interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

type floats interface{ ~float32 | ~float64 }

type complexes interface{ ~complex64 | ~complex128 }

type reals interface{ integers | floats }

var le = binary.LittleEndian

// applyInt runs op over integer elements of size bytes. Loads go through
// uint64 (conversion to T truncates) and stores through uint64 (conversion
// from T sign-extends, then the low size bytes are kept).
func applyInt[T integers](op Op, size int, dst, operand, compare []byte) {
	for i := 0; i < len(dst); i += size {
		d := T(loadUint(dst[i:], size))
		s := T(loadUint(operand[i:], size))
		var c T
		if len(compare) > 0 {
			c = T(loadUint(compare[i:], size))
		}
		if v, ok := intOp(op, d, s, c); ok {
			storeUint(dst[i:], size, uint64(v))
		}
	}
}

// applyFloat runs op over float elements of size bytes (4 or 8).
func applyFloat[T floats](op Op, size int, dst, operand, compare []byte) {
	for i := 0; i < len(dst); i += size {
		d := loadFloat[T](dst[i:], size)
		s := loadFloat[T](operand[i:], size)
		var c T
		if len(compare) > 0 {
			c = loadFloat[T](compare[i:], size)
		}
		if v, ok := realOp(op, d, s, c); ok {
			storeFloat(dst[i:], size, v)
		}
	}
}

// applyComplex runs op over complex elements, each two floats of half bytes.
func applyComplex[T complexes](op Op, half int, dst, operand []byte) {
	for i := 0; i < len(dst); i += 2 * half {
		d := complex(loadFloat[float64](dst[i:], half), loadFloat[float64](dst[i+half:], half))
		s := complex(loadFloat[float64](operand[i:], half), loadFloat[float64](operand[i+half:], half))
		// Arithmetic in T: complex64 rounds as complex64 does.
		v, ok := arith(op, T(d), T(s))
		if ok {
			w := complex128(v)
			storeFloat(dst[i:], half, real(w))
			storeFloat(dst[i+half:], half, imag(w))
		}
	}
}

// intOp computes the new value of an integer element, and whether op
// writes it.
func intOp[T integers](op Op, d, s, c T) (T, bool) {
	switch op {
	case LOr:
		return boolValue[T](d != 0 || s != 0), true
	case LAnd:
		return boolValue[T](d != 0 && s != 0), true
	case LXor:
		return boolValue[T]((d != 0) != (s != 0)), true
	case BOr:
		return d | s, true
	case BAnd:
		return d & s, true
	case BXor:
		return d ^ s, true
	case MSwap:
		return s&c | d&^c, true
	}
	return realOp(op, d, s, c)
}

// realOp computes the new value of an integer or float element for the ops
// those share, and whether op writes it.
func realOp[T reals](op Op, d, s, c T) (T, bool) {
	switch op {
	case Min:
		return s, s < d
	case Max:
		return s, s > d
	case CSwapLE:
		return s, c <= d
	case CSwapLT:
		return s, c < d
	case CSwapGE:
		return s, c >= d
	case CSwapGT:
		return s, c > d
	}
	return arith(op, d, s)
}

// arith computes Sum and Prod for every numeric representation.
func arith[T reals | complexes](op Op, d, s T) (T, bool) {
	switch op {
	case Sum:
		return d + s, true
	case Prod:
		return d * s, true
	}
	return d, false
}

func boolValue[T integers](b bool) T {
	if b {
		return 1
	}
	return 0
}

func loadUint(b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(le.Uint16(b))
	case 4:
		return uint64(le.Uint32(b))
	}
	return le.Uint64(b)
}

func storeUint(b []byte, size int, v uint64) {
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		le.PutUint16(b, uint16(v))
	case 4:
		le.PutUint32(b, uint32(v))
	default:
		le.PutUint64(b, v)
	}
}

// loadFloat reads a binary32 (size 4) or binary64 (size 8) as T.
func loadFloat[T floats](b []byte, size int) T {
	if size == 4 {
		return T(math.Float32frombits(le.Uint32(b)))
	}
	return T(math.Float64frombits(le.Uint64(b)))
}

// storeFloat writes v as a binary32 (size 4) or binary64 (size 8).
func storeFloat[T floats](b []byte, size int, v T) {
	if size == 4 {
		le.PutUint32(b, math.Float32bits(float32(v)))
		return
	}
	le.PutUint64(b, math.Float64bits(float64(v)))
}
