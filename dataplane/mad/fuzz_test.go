package mad

import (
	"bytes"
	"reflect"
	"testing"
)

// decodeAny decodes d as the message m names, re-encodes it into a fresh
// buffer and checks that decoding again gives the same fields and that
// encoding is idempotent: Encode(Fields(x)) drops only reserved bits.
func decodeAny(t *testing.T, attr AttrID, d []byte) {
	re := make([]byte, DataSize)
	again := make([]byte, DataSize)
	same := func(a, b any) {
		t.Helper()
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%v: decode/encode/decode differs\n%+v\n%+v", attr, a, b)
		}
		if !bytes.Equal(re, again) {
			t.Fatalf("%v: Encode is not idempotent", attr)
		}
	}
	switch attr {
	case AttrREQ:
		f := REQ(d).Fields()
		REQ(re).Encode(&f)
		g := REQ(re).Fields()
		REQ(again).Encode(&g)
		same(f, g)
		_ = CMAHeader(REQ(d).PrivateData()).Fields()
	case AttrREP:
		f := REP(d).Fields()
		REP(re).Encode(&f)
		g := REP(re).Fields()
		REP(again).Encode(&g)
		same(f, g)
	case AttrREJ:
		f := REJ(d).Fields()
		REJ(re).Encode(&f)
		g := REJ(re).Fields()
		REJ(again).Encode(&g)
		same(f, g)
	case AttrRTU:
		f := RTU(d).Fields()
		RTU(re).Encode(&f)
		g := RTU(re).Fields()
		RTU(again).Encode(&g)
		same(f, g)
	case AttrDREQ:
		f := DREQ(d).Fields()
		DREQ(re).Encode(&f)
		g := DREQ(re).Fields()
		DREQ(again).Encode(&g)
		same(f, g)
	case AttrDREP:
		f := DREP(d).Fields()
		DREP(re).Encode(&f)
		g := DREP(re).Fields()
		DREP(again).Encode(&g)
		same(f, g)
	case AttrMRA:
		f := MRA(d).Fields()
		MRA(re).Encode(&f)
		g := MRA(re).Fields()
		MRA(again).Encode(&g)
		same(f, g)
	case AttrSIDRREQ:
		f := SIDRREQ(d).Fields()
		SIDRREQ(re).Encode(&f)
		g := SIDRREQ(re).Fields()
		SIDRREQ(again).Encode(&g)
		same(f, g)
		_ = CMAHeader(SIDRREQ(d).PrivateData()).Fields()
	case AttrSIDRREP:
		f := SIDRREP(d).Fields()
		SIDRREP(re).Encode(&f)
		g := SIDRREP(re).Fields()
		SIDRREP(again).Encode(&g)
		same(f, g)
	}
}

func FuzzParse(f *testing.F) {
	for _, attr := range []AttrID{AttrREQ, AttrREP, AttrREJ, AttrRTU, AttrDREQ, AttrDREP, AttrMRA, AttrSIDRREQ, AttrSIDRREP, AttrLAP} {
		m := MAD(make([]byte, Size))
		h := CMHeader(attr, 1)
		m.EncodeHeader(&h)
		for i := range m.Data() {
			m.Data()[i] = byte(i * 7)
		}
		f.Add([]byte(m))
	}
	f.Add([]byte{})
	f.Add(make([]byte, Size-1))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if m != nil {
				t.Fatal("failed Parse returned a view")
			}
			return
		}
		if !m.IsValid() || len(m.Data()) != DataSize {
			t.Fatal("Parse returned a short MAD")
		}
		_ = m.Header()
		_ = m.CheckCM()
		decodeAny(t, m.AttributeID(), m.Data())
	})
}

// FuzzViews runs every view over arbitrary bytes of any length: a view that
// says it is valid must never panic, whatever it holds.
func FuzzViews(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, DataSize))
	f.Add(bytes.Repeat([]byte{0xff}, DataSize+3))
	f.Add(bytes.Repeat([]byte{0x40}, CMAHeaderSize))
	f.Fuzz(func(t *testing.T, d []byte) {
		valid := len(d) >= DataSize
		if REQ(d).IsValid() != valid || REP(d).IsValid() != valid || REJ(d).IsValid() != valid ||
			RTU(d).IsValid() != valid || DREQ(d).IsValid() != valid || DREP(d).IsValid() != valid ||
			MRA(d).IsValid() != valid || SIDRREQ(d).IsValid() != valid || SIDRREP(d).IsValid() != valid {
			t.Fatal("IsValid disagrees with the length")
		}
		if valid {
			for _, a := range []AttrID{AttrREQ, AttrREP, AttrREJ, AttrRTU, AttrDREQ, AttrDREP, AttrMRA, AttrSIDRREQ, AttrSIDRREP} {
				decodeAny(t, a, d)
			}
		}
		if Path(d).IsValid() {
			p := Path(d).Fields()
			Path(make([]byte, PathSize)).Encode(&p)
		}
		if h := CMAHeader(d); h.IsValid() {
			cf := h.Fields()
			CMAHeader(make([]byte, CMAHeaderSize)).Encode(&cf)
		}
		if m := MAD(d); m.IsValid() {
			_ = m.Header()
			_ = m.Data()
		}
	})
}
