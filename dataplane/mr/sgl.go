package mr

// SGE is one scatter/gather element: length bytes at IOVA addr under lkey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SGLLen returns the length of the message that sgl describes. The sum of
// uint32 lengths fits int only where int is 64 bits, which softfabric
// assumes (amd64, arm64).
func SGLLen(sgl []SGE) int {
	n := 0
	for i := range sgl {
		n += int(sgl[i].Length)
	}
	return n
}

// Gather copies up to len(dst) bytes of the message described by sgl,
// starting at message offset off, into dst, and returns the bytes copied:
// fewer than len(dst) only at the end of the message. An offset past the end
// is ErrLength.
//
// Each SGE that contributes bytes is checked whole, not just the part
// copied, so a bad SGE fails the same way whatever the offset. SGEs are
// resolved per call; that is one atomic load and a few compares each.
func (t *Table) Gather(dst []byte, sgl []SGE, off int) (int, error) {
	if off < 0 {
		return 0, ErrLength
	}
	n := 0
	for i := range sgl {
		s := &sgl[i]
		l := int(s.Length)
		if off >= l {
			off -= l
			continue
		}
		if n == len(dst) {
			return n, nil
		}
		b, err := t.Local(s.LKey, s.Addr, s.Length, 0)
		if err != nil {
			return n, err
		}
		n += copy(dst[n:], b[off:])
		off = 0
	}
	if off > 0 {
		return n, ErrLength
	}
	return n, nil
}

// Scatter copies src into the message described by sgl at message offset
// off; every region written needs LocalWrite. A src that does not fit is
// ErrLength before anything is written; a bad SGE stops the copy there and
// leaves the bytes before it written, which verbs permits (the buffer of a
// failed receive is undefined).
func (t *Table) Scatter(sgl []SGE, off int, src []byte) (int, error) {
	if off < 0 || len(src) > SGLLen(sgl)-off {
		return 0, ErrLength
	}
	n := 0
	for i := range sgl {
		if n == len(src) {
			break
		}
		s := &sgl[i]
		l := int(s.Length)
		if off >= l {
			off -= l
			continue
		}
		b, err := t.Local(s.LKey, s.Addr, s.Length, LocalWrite)
		if err != nil {
			return n, err
		}
		n += Place(b[off:], src[n:])
		off = 0
	}
	return n, nil
}

// Place copies src to dst, as copy does, except when the two already
// start at the same byte: a payload the device placed where it belongs
// (link.Placer) is not copied onto itself.
func Place(dst, src []byte) int {
	if len(dst) > 0 && len(src) > 0 && &dst[0] == &src[0] {
		return min(len(dst), len(src))
	}
	return copy(dst, src)
}
