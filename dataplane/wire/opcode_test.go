package wire

import (
	"strings"
	"testing"
)

// ibtaOpcodes is the IBTA opcode list (RC, UC, UD) plus the RoCEv2 CNP,
// written out independently of opcode.go: number, name, extension headers
// in wire order, whether a payload follows, and the resulting header length
// counted by hand.
var ibtaOpcodes = []struct {
	op      uint8
	name    string
	headers string
	payload bool
	hdrLen  int
}{
	{0x00, "RC_SEND_FIRST", "", true, 12},
	{0x01, "RC_SEND_MIDDLE", "", true, 12},
	{0x02, "RC_SEND_LAST", "", true, 12},
	{0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x04, "RC_SEND_ONLY", "", true, 12},
	{0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x06, "RC_RDMA_WRITE_FIRST", "RETH", true, 28},
	{0x07, "RC_RDMA_WRITE_MIDDLE", "", true, 12},
	{0x08, "RC_RDMA_WRITE_LAST", "", true, 12},
	{0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x0a, "RC_RDMA_WRITE_ONLY", "RETH", true, 28},
	{0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH ImmDt", true, 32},
	{0x0c, "RC_RDMA_READ_REQUEST", "RETH", false, 28},
	{0x0d, "RC_RDMA_READ_RESPONSE_FIRST", "AETH", true, 16},
	{0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", "", true, 12},
	{0x0f, "RC_RDMA_READ_RESPONSE_LAST", "AETH", true, 16},
	{0x10, "RC_RDMA_READ_RESPONSE_ONLY", "AETH", true, 16},
	{0x11, "RC_ACKNOWLEDGE", "AETH", false, 16},
	{0x12, "RC_ATOMIC_ACKNOWLEDGE", "AETH AtomicAckETH", false, 24},
	{0x13, "RC_COMPARE_SWAP", "AtomicETH", false, 40},
	{0x14, "RC_FETCH_ADD", "AtomicETH", false, 40},
	{0x16, "RC_SEND_LAST_WITH_INVALIDATE", "IETH", true, 16},
	{0x17, "RC_SEND_ONLY_WITH_INVALIDATE", "IETH", true, 16},
	{0x20, "UC_SEND_FIRST", "", true, 12},
	{0x21, "UC_SEND_MIDDLE", "", true, 12},
	{0x22, "UC_SEND_LAST", "", true, 12},
	{0x23, "UC_SEND_LAST_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x24, "UC_SEND_ONLY", "", true, 12},
	{0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x26, "UC_RDMA_WRITE_FIRST", "RETH", true, 28},
	{0x27, "UC_RDMA_WRITE_MIDDLE", "", true, 12},
	{0x28, "UC_RDMA_WRITE_LAST", "", true, 12},
	{0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "ImmDt", true, 16},
	{0x2a, "UC_RDMA_WRITE_ONLY", "RETH", true, 28},
	{0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RETH ImmDt", true, 32},
	{0x64, "UD_SEND_ONLY", "DETH", true, 20},
	{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", "DETH ImmDt", true, 24},
	{0x81, "CNP", "Reserved16", false, 28},
}

var testHeaderSizes = map[string]int{
	"RETH": 16, "AETH": 4, "AtomicETH": 28, "AtomicAckETH": 8,
	"ImmDt": 4, "IETH": 4, "DETH": 8, "Reserved16": 16,
}

func headerOffset(info *OpInfo, name string) (int, Mask) {
	switch name {
	case "RETH":
		return info.RETH, MaskRETH
	case "AETH":
		return info.AETH, MaskAETH
	case "AtomicETH":
		return info.AtomicETH, MaskAtomicETH
	case "AtomicAckETH":
		return info.AtomicAckETH, MaskAtomicAckETH
	case "ImmDt":
		return info.ImmDt, MaskImmDt
	case "IETH":
		return info.IETH, MaskIETH
	case "DETH":
		return info.DETH, MaskDETH
	}
	return -1, 0
}

func TestOpcodeTable(t *testing.T) {
	listed := map[uint8]bool{}
	for _, want := range ibtaOpcodes {
		listed[want.op] = true
		op := Opcode(want.op)
		info := op.Info()
		if !op.Valid() || op.String() != want.name || info.Name != want.name {
			t.Errorf("%#02x: Valid %v, String %q, Name %q; want %q", want.op, op.Valid(), op, info.Name, want.name)
		}
		if info.HeaderLen != want.hdrLen {
			t.Errorf("%v: HeaderLen %d, want %d", op, info.HeaderLen, want.hdrLen)
		}
		if got := info.Mask&MaskPayload != 0; got != want.payload {
			t.Errorf("%v: payload %v, want %v", op, got, want.payload)
		}
		// Walk the listed headers in wire order: each must sit right after
		// the previous one, and no other header may be present.
		off, seen := BTHSize, Mask(0)
		for _, h := range strings.Fields(want.headers) {
			got, bit := headerOffset(info, h)
			if bit != 0 {
				if got != off {
					t.Errorf("%v: %s at %d, want %d", op, h, got, off)
				}
				seen |= bit
			}
			off += testHeaderSizes[h]
		}
		if off != want.hdrLen {
			t.Fatalf("%v: expected list is inconsistent: %d != %d", op, off, want.hdrLen)
		}
		if info.Mask&MaskHeaders != seen {
			t.Errorf("%v: header bits %#x, want %#x", op, info.Mask&MaskHeaders, seen)
		}
		for _, h := range []string{"RETH", "AETH", "AtomicETH", "AtomicAckETH", "ImmDt", "IETH", "DETH"} {
			if got, bit := headerOffset(info, h); seen&bit == 0 && got != 0 {
				t.Errorf("%v: absent %s has offset %d", op, h, got)
			}
		}
		checkMeaning(t, op, info)
	}
	for i := range 256 {
		op := Opcode(i)
		if listed[uint8(i)] {
			continue
		}
		if op.Valid() || op.Info() == nil || op.Info().Mask != 0 || op.Info().HeaderLen != 0 {
			t.Errorf("undefined %#02x: Valid %v, Info %+v", i, op.Valid(), op.Info())
		}
		if want := "OPCODE(0x" + hex2(uint8(i)) + ")"; op.String() != want {
			t.Errorf("String(%#02x) = %q, want %q", i, op.String(), want)
		}
	}
}

func hex2(b uint8) string {
	const d = "0123456789abcdef"
	return string([]byte{d[b>>4], d[b&0xf]})
}

// checkMeaning derives the meaning bits from the IBTA name and compares.
func checkMeaning(t *testing.T, op Opcode, info *OpInfo) {
	t.Helper()
	name, m := info.Name, info.Mask
	has := func(s string) bool { return strings.Contains(name, s) }
	expect := func(what string, bit Mask, want bool) {
		if got := m&bit != 0; got != want {
			t.Errorf("%v: %s bit %v, want %v", op, what, got, want)
		}
	}
	service := map[uint8]Mask{0: MaskRC, 1: MaskUC, 3: MaskUD, 4: MaskCNP}[uint8(op)>>5]
	if m&(MaskRC|MaskUC|MaskUD|MaskCNP) != service {
		t.Errorf("%v: service bits %#x, want %#x", op, m&(MaskRC|MaskUC|MaskUD|MaskCNP), service)
	}
	isSend, isWrite := has("_SEND_"), has("RDMA_WRITE")
	isReadResp, isAck := has("READ_RESPONSE"), has("ACKNOWLEDGE")
	isAtomic := has("COMPARE_SWAP") || has("FETCH_ADD")
	expect("Send", MaskSend, isSend)
	expect("Write", MaskWrite, isWrite)
	expect("Read", MaskRead, has("READ_REQUEST"))
	expect("ReadResponse", MaskReadResponse, isReadResp)
	expect("Atomic", MaskAtomic, isAtomic)
	expect("AtomicAck", MaskAtomicAck, has("ATOMIC_ACKNOWLEDGE"))
	expect("Ack", MaskAck, isAck)
	expect("Response", MaskResponse, isReadResp || isAck)
	expect("Request", MaskRequest, isSend || isWrite || has("READ_REQUEST") || isAtomic)
	expect("Imm", MaskImm, has("IMMEDIATE"))
	expect("ImmDt", MaskImmDt, has("IMMEDIATE"))
	expect("Inv", MaskInv, has("INVALIDATE"))
	expect("IETH", MaskIETH, has("INVALIDATE"))
	single := !has("_FIRST") && !has("_MIDDLE") && !has("_LAST") && op != CNP
	last := has("_LAST") || has("_ONLY") || single
	expect("First", MaskFirst, has("_FIRST") || has("_ONLY") || single)
	expect("Middle", MaskMiddle, has("_MIDDLE"))
	expect("Last", MaskLast, last)
	expect("RecvWQE", MaskRecvWQE, isSend || (isWrite && has("IMMEDIATE")))
	expect("Complete", MaskComplete, last && (isSend || (isWrite && has("IMMEDIATE"))))
}

func TestMaskHelpers(t *testing.T) {
	m := RCSendOnly.Info().Mask
	if !m.Has(MaskOnly) || m.Has(MaskOnly|MaskRETH) || !m.Any(MaskRETH|MaskSend) || m.Any(MaskRETH|MaskAETH) {
		t.Errorf("Has/Any wrong for %#x", m)
	}
}
