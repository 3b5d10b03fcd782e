package mad

import (
	"errors"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	good := make([]byte, Size+10)
	h := CMHeader(AttrRTU, 1)
	MAD(good).EncodeHeader(&h)
	if m, err := ParseCM(good); err != nil || len(m) != Size || cap(m) != Size {
		t.Fatalf("ParseCM(good) = %d bytes, %v", len(m), err)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrShort},
		{"255 bytes", func(b []byte) []byte { return b[:Size-1] }, ErrShort},
		{"base version 2", func(b []byte) []byte { b[0] = 2; return b }, ErrVersion},
		{"SA class", func(b []byte) []byte { b[1] = 0x03; return b }, ErrClass},
		{"class version 1", func(b []byte) []byte { b[2] = 1; return b }, ErrClassVersion},
		{"Get method", func(b []byte) []byte { b[3] = MethodGet; return b }, ErrMethod},
	} {
		b := tc.edit(append([]byte(nil), good...))
		if _, err := ParseCM(b); !errors.Is(err, tc.want) {
			t.Errorf("%s: ParseCM error %v, want %v", tc.name, err, tc.want)
		}
	}
	// Parse alone does not care about the class.
	b := append([]byte(nil), good...)
	b[1] = 0x03
	if _, err := Parse(b); err != nil {
		t.Errorf("Parse of an SA MAD: %v", err)
	}
}

func TestParseAllocs(t *testing.T) {
	bad := make([]byte, 10)
	good := make([]byte, Size)
	h := CMHeader(AttrREQ, 7)
	MAD(good).EncodeHeader(&h)
	if n := testing.AllocsPerRun(100, func() {
		_, _ = ParseCM(bad)
		m, _ := ParseCM(good)
		_ = REQ(m.Data()).Fields()
	}); n != 0 {
		t.Errorf("%v allocations per parse", n)
	}
}

func TestAttrNames(t *testing.T) {
	for a, want := range map[AttrID]string{
		AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
		AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
		AttrLAP: "LAP", AttrAPR: "APR", AttrClassPortInfo: "ClassPortInfo", 0x00ab: "attr(0x00ab)",
	} {
		if a.String() != want {
			t.Errorf("%#x.String() = %q, want %q", uint16(a), a.String(), want)
		}
	}
	if AttrREQ.CMIndex() != 0 || AttrAPR.CMIndex() != NumCMAttrs-1 || AttrClassPortInfo.CMIndex() != -1 || NumCMAttrs != 11 {
		t.Error("CMIndex")
	}
}

func TestRejectReasonString(t *testing.T) {
	for r, want := range map[RejectReason]string{
		RejectNoQP: "no QP", RejectNoResources: "no resources", RejectInvalidServiceID: "invalid service ID",
		RejectStaleConn: "stale conn", RejectConsumerDefined: "consumer defined",
		RejectInvalidAltFlowLabel: "invalid alt flow label", 34: "reject reason 34", 1000: "reject reason 1000",
	} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
	if RejectInvalidServiceID != 8 || RejectNoResources != 3 || RejectConsumerDefined != 28 || RejectVendorOptionNotSupported != 35 {
		t.Error("reject reason values differ from enum ib_cm_rej_reason")
	}
}

func TestTimeout(t *testing.T) {
	if Timeout(0) != 4096*time.Nanosecond || Timeout(20) != 4096*time.Nanosecond<<20 || Timeout(32) != Timeout(0) {
		t.Error("Timeout")
	}
	// CMA_CM_RESPONSE_TIMEOUT 20 is about 4.3 s; the kernel rounds it to 4096 ms.
	if d := Timeout(20); d < 4290*time.Millisecond || d > 4300*time.Millisecond {
		t.Errorf("Timeout(20) = %v", d)
	}
	if Timeout(31) <= 0 {
		t.Error("Timeout(31) overflows")
	}
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		netdev int
		want   MTU
	}{{1500, MTU1024}, {9000, MTU4096}, {4200, MTU4096}, {4000, MTU2048}, {1120, MTU1024}, {1119, MTU512}, {1000, MTU512}, {300, 0}} {
		if got := MTUForEthernet(tc.netdev); got != tc.want {
			t.Errorf("MTUForEthernet(%d) = %d, want %d", tc.netdev, got, tc.want)
		}
	}
	if MTU256.Bytes() != 256 || MTU4096.Bytes() != 4096 || MTU(0).Bytes() != 0 || MTU(6).Bytes() != 0 {
		t.Error("MTU.Bytes")
	}
}
