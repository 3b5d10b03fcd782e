package amo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
)

// The validity rules, written out as lists rather than derived from the
// package's classification.
var (
	intTypes  = []Datatype{Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64}
	realTypes = []Datatype{Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64, Float, Double}
	allTypes  = []Datatype{Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64, Float, Double, FloatComplex, DoubleComplex}

	baseFetch = []Kind{Base, Fetch}
	fetchOnly = []Kind{Fetch}
	cmpOnly   = []Kind{Compare}

	wantRules = map[Op]struct {
		types []Datatype
		kinds []Kind
	}{
		Min:         {realTypes, baseFetch},
		Max:         {realTypes, baseFetch},
		Sum:         {allTypes, baseFetch},
		Prod:        {allTypes, baseFetch},
		LOr:         {intTypes, baseFetch},
		LAnd:        {intTypes, baseFetch},
		BOr:         {intTypes, baseFetch},
		BAnd:        {intTypes, baseFetch},
		LXor:        {intTypes, baseFetch},
		BXor:        {intTypes, baseFetch},
		AtomicRead:  {allTypes, fetchOnly},
		AtomicWrite: {allTypes, baseFetch},
		CSwap:       {allTypes, cmpOnly},
		CSwapNE:     {allTypes, cmpOnly},
		CSwapLE:     {realTypes, cmpOnly},
		CSwapLT:     {realTypes, cmpOnly},
		CSwapGE:     {realTypes, cmpOnly},
		CSwapGT:     {realTypes, cmpOnly},
		MSwap:       {intTypes, cmpOnly},
	}

	wantSize = map[Datatype]int{
		Int8: 1, Uint8: 1, Int16: 2, Uint16: 2, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8,
		Float: 4, Double: 8, FloatComplex: 8, DoubleComplex: 16,
	}

	kindNames = map[Kind]string{Base: "base", Fetch: "fetch", Compare: "compare"}
)

func wantValid(op Op, t Datatype, k Kind) bool {
	r, ok := wantRules[op]
	if !ok {
		return false
	}
	tOK, kOK := false, false
	for _, x := range r.types {
		tOK = tOK || x == t
	}
	for _, x := range r.kinds {
		kOK = kOK || x == k
	}
	return tOK && kOK
}

// Every op, datatype and kind number the tests try, including a few beyond
// the enums.
func eachCombo(fn func(op Op, t Datatype, k Kind)) {
	for op := Op(0); op <= numOps+2; op++ {
		for t := Datatype(0); t <= numTypes+2; t++ {
			for k := Kind(0); k <= Compare+2; k++ {
				fn(op, t, k)
			}
		}
	}
	fn(255, Int32, Base)
	fn(Sum, 255, Base)
	fn(Sum, Int32, 255)
}

func TestEnumNumbering(t *testing.T) {
	// libfabric include/rdma/fi_atomic.h.
	ops := []Op{Min, Max, Sum, Prod, LOr, LAnd, BOr, BAnd, LXor, BXor, AtomicRead,
		AtomicWrite, CSwap, CSwapNE, CSwapLE, CSwapLT, CSwapGE, CSwapGT, MSwap}
	for i, op := range ops {
		if int(op) != i {
			t.Errorf("%v = %d, libfabric has %d", op, op, i)
		}
	}
	types := []Datatype{Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64, Float,
		Double, FloatComplex, DoubleComplex, LongDouble, LongDoubleComplex}
	for i, dt := range types {
		if int(dt) != i {
			t.Errorf("%v = %d, libfabric has %d", dt, dt, i)
		}
	}
	if numOps != 19 || numTypes != 14 {
		t.Errorf("numOps %d numTypes %d", numOps, numTypes)
	}
}

func TestStrings(t *testing.T) {
	for op, want := range map[Op]string{Min: "min", LXor: "lxor", AtomicRead: "atomic_read",
		CSwapNE: "cswap_ne", MSwap: "mswap", numOps: "op(19)", 200: "op(200)"} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, want)
		}
	}
	for dt, want := range map[Datatype]string{Int8: "int8", Uint64: "uint64", Float: "float",
		DoubleComplex: "double_complex", LongDoubleComplex: "long_double_complex",
		numTypes: "datatype(14)"} {
		if got := dt.String(); got != want {
			t.Errorf("Datatype(%d).String() = %q, want %q", uint8(dt), got, want)
		}
	}
	seen := map[string]bool{}
	for op := Op(0); op < numOps; op++ {
		seen[op.String()] = true
	}
	for dt := Datatype(0); dt < numTypes; dt++ {
		seen[dt.String()] = true
	}
	if len(seen) != int(numOps)+int(numTypes) {
		t.Errorf("names not unique: %d distinct", len(seen))
	}
}

func TestSize(t *testing.T) {
	for dt := Datatype(0); dt <= numTypes+2; dt++ {
		if got := dt.Size(); got != wantSize[dt] {
			t.Errorf("%v.Size() = %d, want %d", dt, got, wantSize[dt])
		}
	}
	if got := Datatype(255).Size(); got != 0 {
		t.Errorf("Datatype(255).Size() = %d", got)
	}
}

func TestValid(t *testing.T) {
	valid := 0
	eachCombo(func(op Op, dt Datatype, k Kind) {
		count, ok := Valid(op, dt, k)
		want := wantValid(op, dt, k)
		wantCount := 0
		if want {
			wantCount = 65536 / wantSize[dt]
			valid++
		}
		if ok != want || count != wantCount {
			t.Errorf("Valid(%v, %v, %d) = %d, %v; want %d, %v", op, dt, k, count, ok, wantCount, want)
		}
	})
	// Per op, types × kinds: min, max 10×2; sum, prod 12×2; six logical and
	// bitwise ops 8×2; read 12×1; write 12×2; cswap, cswap_ne 12×1; four
	// ordered compares 10×1; mswap 8×1.
	if want := 2*10*2 + 2*12*2 + 6*8*2 + 12 + 12*2 + 2*12 + 4*10 + 8; valid != want {
		t.Errorf("%d valid combinations, want %d", valid, want)
	}
}

// Reference semantics, on typed Go values, written independently of the
// package's helpers (builtin min and max, another MSwap formula, libfabric's
// LXOR expression).

type anyInt interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

func refInt[T anyInt](op Op, d, s, c T) T {
	b := func(x bool) T {
		if x {
			return 1
		}
		return 0
	}
	switch op {
	case Min:
		return min(d, s)
	case Max:
		return max(d, s)
	case Sum:
		return d + s
	case Prod:
		return d * s
	case LOr:
		return b(d != 0 || s != 0)
	case LAnd:
		return b(d != 0 && s != 0)
	case LXor:
		return b((d != 0 && s == 0) || (d == 0 && s != 0))
	case BOr:
		return d | s
	case BAnd:
		return d & s
	case BXor:
		return d ^ s
	case MSwap:
		return ((s ^ d) & c) ^ d
	}
	return refCompare(op, d, s, c)
}

func refFloat[T float32 | float64](op Op, d, s, c T) T {
	switch op {
	case Min:
		return min(d, s)
	case Max:
		return max(d, s)
	case Sum:
		return d + s
	case Prod:
		return d * s
	}
	return refCompare(op, d, s, c)
}

func refCompare[T anyInt | float32 | float64](op Op, d, s, c T) T {
	var swap bool
	switch op {
	case AtomicRead:
		return d
	case AtomicWrite:
		return s
	case CSwap:
		swap = c == d
	case CSwapNE:
		swap = c != d
	case CSwapLE:
		swap = c <= d
	case CSwapLT:
		swap = c < d
	case CSwapGE:
		swap = c >= d
	case CSwapGT:
		swap = c > d
	default:
		panic("refCompare: " + op.String())
	}
	if swap {
		return s
	}
	return d
}

func refComplex[T complex64 | complex128](op Op, d, s, c T) T {
	switch op {
	case Sum:
		return d + s
	case Prod:
		return d * s
	case AtomicRead:
		return d
	case AtomicWrite:
		return s
	case CSwap:
		if c == d {
			return s
		}
		return d
	case CSwapNE:
		if c != d {
			return s
		}
		return d
	}
	panic("refComplex: " + op.String())
}

// refBytes decodes the buffers with encoding/binary, applies ref elementwise
// and encodes the new dst.
func refBytes[T any](op Op, size int, dst, operand, compare []byte, ref func(Op, T, T, T) T) []byte {
	n := len(dst) / size
	d, s, c := make([]T, n), make([]T, n), make([]T, n)
	mustDecode(dst, d)
	if op != AtomicRead {
		mustDecode(operand, s)
	}
	if len(compare) > 0 {
		mustDecode(compare, c)
	}
	for i := range d {
		d[i] = ref(op, d[i], s[i], c[i])
	}
	return encode(d)
}

func mustDecode(b []byte, v any) {
	if _, err := binary.Decode(b, binary.LittleEndian, v); err != nil {
		panic(err)
	}
}

func encode(v any) []byte {
	b, err := binary.Append(nil, binary.LittleEndian, v)
	if err != nil {
		panic(err)
	}
	return b
}

// reference returns the dst Apply should leave.
func reference(op Op, dt Datatype, dst, operand, compare []byte) []byte {
	sz := wantSize[dt]
	switch dt {
	case Int8:
		return refBytes(op, sz, dst, operand, compare, refInt[int8])
	case Uint8:
		return refBytes(op, sz, dst, operand, compare, refInt[uint8])
	case Int16:
		return refBytes(op, sz, dst, operand, compare, refInt[int16])
	case Uint16:
		return refBytes(op, sz, dst, operand, compare, refInt[uint16])
	case Int32:
		return refBytes(op, sz, dst, operand, compare, refInt[int32])
	case Uint32:
		return refBytes(op, sz, dst, operand, compare, refInt[uint32])
	case Int64:
		return refBytes(op, sz, dst, operand, compare, refInt[int64])
	case Uint64:
		return refBytes(op, sz, dst, operand, compare, refInt[uint64])
	case Float:
		return refBytes(op, sz, dst, operand, compare, refFloat[float32])
	case Double:
		return refBytes(op, sz, dst, operand, compare, refFloat[float64])
	case FloatComplex:
		return refBytes(op, sz, dst, operand, compare, refComplex[complex64])
	case DoubleComplex:
		return refBytes(op, sz, dst, operand, compare, refComplex[complex128])
	}
	panic("reference: " + dt.String())
}

// Three-element input sets: {dst, operand, compare}. Real sets cover
// compare ==, <, > dst, zero and non-zero logical operands, masks, negative
// values (wrapping for unsigned types) and anyInt overflow; all values are
// exact in float32, as are their sums and products.
var realSets = [][3][]int64{
	{{5, 2, 9}, {3, 0, 12}, {5, 7, 1}},
	{{0, 0, 6}, {0, 4, 0}, {0x0F, 0x3C, 0}},
	{{-3, 100, -128}, {-7, 100, 127}, {-3, 50, 1}},
	{{0x5A, 127, -1}, {-0x5A, 1, 1}, {-1, 0x70, 0x55}},
}

// Complex sets: compare equal in both parts, equal in one part only, and
// different.
var complexSets = [][3][]complex128{
	{{5 - 1i, 2 + 3i, 0}, {3 + 2i, -4i, 7 + 1i}, {5 - 1i, 2 + 4i, 1}},
	{{1 + 1i, -2 + 0.5i, 4}, {0.25 - 8i, 3, -1i}, {1 + 1i, -2 + 0.5i, 4}},
	{{1, 2, 3}, {4, 5, 6}, {1i, 2i, 3}},
}

func conv[T anyInt | float32 | float64 | complex64 | complex128, F int64 | complex128](v []F, f func(F) T) []T {
	out := make([]T, len(v))
	for i, x := range v {
		out[i] = f(x)
	}
	return out
}

func realInputs[T anyInt | float32 | float64](set [3][]int64) (d, s, c []byte) {
	f := func(x int64) T { return T(x) }
	return encode(conv(set[0], f)), encode(conv(set[1], f)), encode(conv(set[2], f))
}

func complexInputs[T complex64 | complex128](set [3][]complex128) (d, s, c []byte) {
	f := func(x complex128) T { return T(x) }
	return encode(conv(set[0], f)), encode(conv(set[1], f)), encode(conv(set[2], f))
}

func inputs(dt Datatype) [][3][]byte {
	var out [][3][]byte
	add := func(d, s, c []byte) { out = append(out, [3][]byte{d, s, c}) }
	for _, set := range realSets {
		switch dt {
		case Int8:
			add(realInputs[int8](set))
		case Uint8:
			add(realInputs[uint8](set))
		case Int16:
			add(realInputs[int16](set))
		case Uint16:
			add(realInputs[uint16](set))
		case Int32:
			add(realInputs[int32](set))
		case Uint32:
			add(realInputs[uint32](set))
		case Int64:
			add(realInputs[int64](set))
		case Uint64:
			add(realInputs[uint64](set))
		case Float:
			add(realInputs[float32](set))
		case Double:
			add(realInputs[float64](set))
		}
	}
	for _, set := range complexSets {
		switch dt {
		case FloatComplex:
			add(complexInputs[complex64](set))
		case DoubleComplex:
			add(complexInputs[complex128](set))
		}
	}
	return out
}

func TestApplyReference(t *testing.T) {
	tested := 0
	eachCombo(func(op Op, dt Datatype, k Kind) {
		if !wantValid(op, dt, k) {
			return
		}
		tested++
		name := fmt.Sprintf("%v/%v/%s", op, dt, kindNames[k])
		for i, in := range inputs(dt) {
			d, s, c := in[0], in[1], in[2]
			if k != Compare {
				c = nil
			}
			if op == AtomicRead && i%2 == 1 {
				s = nil // the operand is unused
			}
			if len(d) != 3*wantSize[dt] {
				t.Fatalf("%s: input set of %d bytes", name, len(d))
			}
			want := reference(op, dt, d, s, c)
			for _, withResult := range []bool{true, false} {
				dst := bytes.Clone(d)
				operand, compare := bytes.Clone(s), bytes.Clone(c)
				var result []byte
				if withResult {
					result = bytes.Repeat([]byte{0xEE}, len(d))
				}
				if err := Apply(op, dt, k, dst, operand, compare, result); err != nil {
					t.Fatalf("%s set %d: %v", name, i, err)
				}
				if !bytes.Equal(dst, want) {
					t.Errorf("%s set %d: dst\n got % x\nwant % x\n(dst % x operand % x compare % x)", name, i, dst, want, d, s, c)
				}
				if withResult && !bytes.Equal(result, d) {
					t.Errorf("%s set %d: result % x, want old dst % x", name, i, result, d)
				}
				if !bytes.Equal(operand, s) || !bytes.Equal(compare, c) {
					t.Errorf("%s set %d: operand or compare modified", name, i)
				}
			}
		}
	})
	// As in TestValid.
	const want = 2*10*2 + 2*12*2 + 6*8*2 + 12 + 12*2 + 2*12 + 4*10 + 8
	if tested != want {
		t.Errorf("tested %d valid combinations, want %d", tested, want)
	}
}

// Spot checks with values written out by hand, so that a shared misreading
// of libfabric in the package and the reference would still show.
func TestApplyKnownValues(t *testing.T) {
	u32 := func(v ...uint32) []byte { return encode(v) }
	i8 := func(v ...int8) []byte { return encode(v) }
	f64 := func(v ...float64) []byte { return encode(v) }
	c64 := func(v ...complex64) []byte { return encode(v) }
	cases := []struct {
		op                     Op
		dt                     Datatype
		k                      Kind
		dst, operand, cmp, out []byte
	}{
		{Sum, Int8, Base, i8(127, -128, 5), i8(1, -1, -10), nil, i8(-128, 127, -5)},
		{Min, Int8, Fetch, i8(-1, 3, 0), i8(2, -4, 0), nil, i8(-1, -4, 0)},
		{Max, Uint32, Base, u32(0xFFFFFFFF, 1, 7), u32(1, 0x80000000, 7), nil, u32(0xFFFFFFFF, 0x80000000, 7)},
		{LXor, Uint32, Base, u32(0, 9, 9), u32(0, 0, 3), nil, u32(0, 1, 0)},
		{LAnd, Int8, Base, i8(-2, 0, 4), i8(3, 3, 0), nil, i8(1, 0, 0)},
		{MSwap, Uint32, Compare, u32(0xAAAAAAAA, 1, 2), u32(0x55555555, 0xFF, 3), u32(0xFFFF0000, 0, 0xFFFFFFFF), u32(0x5555AAAA, 1, 3)},
		{CSwapLT, Int8, Compare, i8(5, 5, 5), i8(1, 2, 3), i8(4, 5, 6), i8(1, 5, 5)},
		{CSwapGE, Uint32, Compare, u32(5, 5, 5), u32(1, 2, 3), u32(4, 5, 6), u32(5, 2, 3)},
		{Prod, Double, Base, f64(1.5, -2, 0.5), f64(2, 3, -0.25), nil, f64(3, -6, -0.125)},
		{Prod, FloatComplex, Fetch, c64(1+2i, 3), c64(3-1i, 1i), nil, c64(5+5i, 3i)},
		{CSwap, FloatComplex, Compare, c64(1+2i, 3), c64(7, 8), c64(1+2i, 3+1i), c64(7, 3)},
	}
	for _, tc := range cases {
		dst := bytes.Clone(tc.dst)
		if err := Apply(tc.op, tc.dt, tc.k, dst, tc.operand, tc.cmp, nil); err != nil {
			t.Errorf("%v %v: %v", tc.op, tc.dt, err)
			continue
		}
		if !bytes.Equal(dst, tc.out) {
			t.Errorf("%v %v: got % x want % x", tc.op, tc.dt, dst, tc.out)
		}
	}
}

// Floats: Min and Max keep dst unless operand compares less (greater), as
// libfabric's "if (dst > src) dst = src"; CSwap and CSwapNE compare bytes.
func TestFloatEdgeCases(t *testing.T) {
	nan := math.NaN()
	negZero := math.Copysign(0, -1)
	snan32 := math.Float32frombits(0x7F800001) // signalling NaN, payload 1
	f64 := func(v ...float64) []byte { return encode(v) }
	cases := []struct {
		name                   string
		op                     Op
		k                      Kind
		dst, operand, cmp, out []byte
	}{
		{"min nan", Min, Base, f64(nan, 1), f64(1, nan), nil, f64(nan, 1)},
		{"max nan", Max, Base, f64(nan, 1), f64(1, nan), nil, f64(nan, 1)},
		{"min zeros", Min, Base, f64(0, negZero), f64(negZero, 0), nil, f64(0, negZero)},
		{"cswap nan matches nan", CSwap, Compare, f64(nan, 5), f64(1, 2), f64(nan, 5), f64(1, 2)},
		{"cswap -0 is not +0", CSwap, Compare, f64(0, negZero), f64(1, 2), f64(negZero, 0), f64(0, negZero)},
		{"cswap_ne -0 is not +0", CSwapNE, Compare, f64(0, 3), f64(1, 2), f64(negZero, 3), f64(1, 3)},
		{"cswap_le nan never", CSwapLE, Compare, f64(nan, 1), f64(1, 2), f64(1, nan), f64(nan, 1)},
		{"cswap_gt ordered", CSwapGT, Compare, f64(1, 1), f64(7, 8), f64(2, negZero), f64(7, 1)},
		{"write keeps payload", AtomicWrite, Base, f64(1), encode([]uint64{0x7FF0000000000001}), nil, encode([]uint64{0x7FF0000000000001})},
	}
	for _, tc := range cases {
		dst := bytes.Clone(tc.dst)
		if err := Apply(tc.op, Double, tc.k, dst, tc.operand, tc.cmp, nil); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if !bytes.Equal(dst, tc.out) {
			t.Errorf("%s: got % x want % x", tc.name, dst, tc.out)
		}
	}
	// An element Min leaves alone keeps its exact bits, signalling NaN too.
	dst := encode([]float32{snan32})
	want := bytes.Clone(dst)
	if err := Apply(Min, Float, Base, dst, encode([]float32{1}), nil, nil); err != nil || !bytes.Equal(dst, want) {
		t.Errorf("min over sNaN: % x, %v; want % x", dst, err, want)
	}
}

func TestApplyNotSupported(t *testing.T) {
	eachCombo(func(op Op, dt Datatype, k Kind) {
		if wantValid(op, dt, k) {
			return
		}
		buf := func() []byte { return bytes.Repeat([]byte{1}, 16) }
		dst, result := buf(), buf()
		err := Apply(op, dt, k, dst, buf(), buf(), result)
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("Apply(%v, %v, %d) = %v, want ErrNotSupported", op, dt, k, err)
		}
		if !bytes.Equal(dst, buf()) || !bytes.Equal(result, buf()) {
			t.Errorf("Apply(%v, %v, %d) wrote on error", op, dt, k)
		}
	})
}

func TestApplyLength(t *testing.T) {
	b := func(n int) []byte { return make([]byte, n) }
	cases := []struct {
		name                          string
		op                            Op
		dt                            Datatype
		k                             Kind
		dst, operand, compare, result []byte
		want                          error
	}{
		{"ok", Sum, Int32, Base, b(12), b(12), nil, nil, nil},
		{"ok empty", Sum, Int32, Base, nil, nil, nil, nil, nil},
		{"ok read without operand", AtomicRead, Double, Fetch, b(16), nil, nil, b(16), nil},
		{"ok read ignores operand", AtomicRead, Double, Fetch, b(16), b(3), nil, b(16), nil},
		{"ok result in base kind", Sum, Int32, Base, b(8), b(8), nil, b(8), nil},
		{"ok compare", MSwap, Uint16, Compare, b(6), b(6), b(6), b(6), nil},
		{"ok at the limit", Sum, Uint8, Base, b(maxBytes), b(maxBytes), nil, nil, nil},
		{"partial element", Sum, Int32, Base, b(13), b(13), nil, nil, ErrLength},
		{"partial complex", Sum, DoubleComplex, Base, b(24), b(24), nil, nil, ErrLength},
		{"short operand", Sum, Int32, Base, b(12), b(8), nil, nil, ErrLength},
		{"long operand", Sum, Int32, Base, b(12), b(16), nil, nil, ErrLength},
		{"missing operand", AtomicWrite, Int32, Base, b(12), nil, nil, nil, ErrLength},
		{"missing compare", CSwap, Int32, Compare, b(12), b(12), nil, b(12), ErrLength},
		{"short compare", CSwap, Int32, Compare, b(12), b(12), b(8), b(12), ErrLength},
		{"compare in base kind", Sum, Int32, Base, b(12), b(12), b(12), nil, ErrLength},
		{"compare in fetch kind", Sum, Int32, Fetch, b(12), b(12), b(12), b(12), ErrLength},
		{"short result", Sum, Int32, Fetch, b(12), b(12), nil, b(8), ErrLength},
		{"empty non-nil result", Sum, Int32, Fetch, b(12), b(12), nil, []byte{}, ErrLength},
		{"over the limit", Sum, Uint8, Base, b(maxBytes + 1), b(maxBytes + 1), nil, nil, ErrLength},
		{"over the limit, wide", Sum, DoubleComplex, Base, b(maxBytes + 16), b(maxBytes + 16), nil, nil, ErrLength},
		{"unsupported before length", Sum, LongDouble, Base, b(3), b(5), nil, nil, ErrNotSupported},
	}
	for _, tc := range cases {
		err := Apply(tc.op, tc.dt, tc.k, tc.dst, tc.operand, tc.compare, tc.result)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Apply = %v, want %v", tc.name, err, tc.want)
		}
	}
	for dt, size := range wantSize {
		if count, _ := Valid(Sum, dt, Base); count*size != maxBytes {
			t.Errorf("%v: count %d × %d bytes ≠ %d", dt, count, size, maxBytes)
		}
	}
}

func TestApplyAllocs(t *testing.T) {
	eachCombo(func(op Op, dt Datatype, k Kind) {
		if !wantValid(op, dt, k) {
			return
		}
		n := 4 * wantSize[dt]
		dst, operand, result := make([]byte, n), make([]byte, n), make([]byte, n)
		var compare []byte
		if k == Compare {
			compare = make([]byte, n)
		}
		allocs := testing.AllocsPerRun(20, func() {
			if err := Apply(op, dt, k, dst, operand, compare, result); err != nil {
				panic(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Apply(%v, %v, %d): %v allocations", op, dt, k, allocs)
		}
	})
	buf := make([]byte, 8)
	if allocs := testing.AllocsPerRun(20, func() {
		_ = Apply(MSwap, Float, Compare, buf, buf, buf, nil)
		_ = Apply(Sum, Int32, Base, buf, buf[:4], nil, nil)
	}); allocs != 0 {
		t.Errorf("Apply errors: %v allocations", allocs)
	}
}

func FuzzApply(f *testing.F) {
	f.Add(uint8(Sum), uint8(Int32), uint8(Base), []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}, []byte(nil), true)
	f.Add(uint8(CSwap), uint8(DoubleComplex), uint8(Compare), make([]byte, 16), make([]byte, 16), make([]byte, 16), true)
	f.Add(uint8(MSwap), uint8(Uint16), uint8(Compare), []byte{1, 2, 3, 4}, []byte{5, 6, 7, 8}, []byte{0xF0, 0x0F, 0, 0xFF}, false)
	f.Add(uint8(AtomicRead), uint8(Float), uint8(Fetch), []byte{0, 0, 0x80, 0x7F}, []byte(nil), []byte(nil), true)
	f.Add(uint8(LXor), uint8(Int8), uint8(Fetch), []byte{0, 1, 0, 7}, []byte{0, 0, 9, 3}, []byte(nil), true)
	f.Add(uint8(Min), uint8(Double), uint8(Base), make([]byte, 9), make([]byte, 9), []byte(nil), false)
	f.Fuzz(func(t *testing.T, op, dt, k uint8, dst, operand, compare []byte, withResult bool) {
		// The fuzzer may hand over slices that share memory: keep copies of
		// the inputs for the checks.
		orig, origOperand, origCompare := bytes.Clone(dst), bytes.Clone(operand), bytes.Clone(compare)
		var result []byte
		if withResult {
			result = make([]byte, len(dst))
		}
		err := Apply(Op(op), Datatype(dt), Kind(k), dst, operand, compare, result)
		if err != nil {
			if !errors.Is(err, ErrNotSupported) && !errors.Is(err, ErrLength) {
				t.Fatalf("unexpected error %v", err)
			}
			if !bytes.Equal(dst, orig) {
				t.Fatalf("dst modified on error %v", err)
			}
			return
		}
		if _, ok := Valid(Op(op), Datatype(dt), Kind(k)); !ok {
			t.Fatalf("Apply succeeded on an invalid combination")
		}
		if withResult && !bytes.Equal(result, orig) {
			t.Fatalf("result % x, want old dst % x", result, orig)
		}
		// Integer semantics have no NaN or signed-zero subtleties: check
		// them against the reference for any input.
		if Datatype(dt) <= Uint64 {
			if want := reference(Op(op), Datatype(dt), orig, origOperand, origCompare); !bytes.Equal(dst, want) {
				t.Fatalf("%v %v: got % x want % x", Op(op), Datatype(dt), dst, want)
			}
		}
	})
}
