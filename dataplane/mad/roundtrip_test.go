package mad

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

// gen draws field values no wider than their wire fields.
type gen struct{ r *rand.Rand }

func (g gen) u8(bits uint) uint8 { return uint8(g.r.Uint32() & (1<<bits - 1)) }
func (g gen) u16() uint16        { return uint16(g.r.Uint32()) }
func (g gen) u24() uint32        { return g.r.Uint32() & mask24 }
func (g gen) u32() uint32        { return g.r.Uint32() }
func (g gen) u64() uint64        { return g.r.Uint64() }
func (g gen) flag() bool         { return g.r.IntN(2) == 1 }
func (g gen) bytes(n int) []byte { b := make([]byte, n); g.fill(b); return b }
func (g gen) fill(b []byte) {
	for i := range b {
		b[i] = byte(g.r.Uint32())
	}
}
func (g gen) gid() (x [16]byte)    { g.fill(x[:]); return x }
func (g gen) priv(size int) []byte { return g.bytes(size) } // full size: Fields returns all of it
func (g gen) path() PathFields {
	return PathFields{
		LocalLID: g.u16(), RemoteLID: g.u16(), LocalGID: g.gid(), RemoteGID: g.gid(),
		FlowLabel: g.u32() >> 12, PacketRate: g.u8(6), TrafficClass: g.u8(8), HopLimit: g.u8(8),
		SL: g.u8(4), SubnetLocal: g.flag(), LocalACKTimeout: g.u8(5),
	}
}

func TestRoundTrips(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	buf := make([]byte, DataSize)
	check := func(name string, want, got any) {
		t.Helper()
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s round trip\n got %+v\nwant %+v", name, got, want)
		}
	}
	for range 200 {
		req := REQFields{
			LocalCommID: g.u32(), VendorID: g.u24(), ServiceID: g.u64(), LocalCAGUID: g.u64(),
			LocalQKey: g.u32(), LocalQPN: g.u24(), ResponderResources: g.u8(8), LocalEECN: g.u24(),
			InitiatorDepth: g.u8(8), RemoteEECN: g.u24(), RemoteCMResponseTimeout: g.u8(5),
			Transport: Transport(g.u8(2)), EndToEndFlowControl: g.flag(), StartingPSN: g.u24(),
			LocalCMResponseTimeout: g.u8(5), RetryCount: g.u8(3), PKey: g.u16(), PathMTU: MTU(g.u8(4)),
			RDCExists: g.flag(), RNRRetryCount: g.u8(3), MaxCMRetries: g.u8(4), SRQ: g.flag(),
			ExtendedTransportType: g.u8(3), Primary: g.path(), Alternate: g.path(),
			SAPSupported: g.flag(), PrivateData: g.priv(REQPrivateDataSize),
		}
		REQ(buf).Encode(&req)
		check("REQ", req, REQ(buf).Fields())

		rep := REPFields{
			LocalCommID: g.u32(), RemoteCommID: g.u32(), LocalQKey: g.u32(), LocalQPN: g.u24(),
			LocalEECN: g.u24(), StartingPSN: g.u24(), VendorID: g.u24(), ResponderResources: g.u8(8),
			InitiatorDepth: g.u8(8), TargetACKDelay: g.u8(5), FailoverAccepted: g.u8(2),
			EndToEndFlowControl: g.flag(), RNRRetryCount: g.u8(3), SRQ: g.flag(), LocalCAGUID: g.u64(),
			PrivateData: g.priv(REPPrivateDataSize),
		}
		REP(buf).Encode(&rep)
		check("REP", rep, REP(buf).Fields())

		rej := REJFields{
			LocalCommID: g.u32(), RemoteCommID: g.u32(), MessageRejected: Msg(g.u8(2)),
			Reason: RejectReason(g.u16()), ARI: g.bytes(g.r.IntN(ARISize + 1)), PrivateData: g.priv(REJPrivateDataSize),
		}
		REJ(buf).Encode(&rej)
		check("REJ", rej, REJ(buf).Fields())

		rtu := RTUFields{LocalCommID: g.u32(), RemoteCommID: g.u32(), PrivateData: g.priv(RTUPrivateDataSize)}
		RTU(buf).Encode(&rtu)
		check("RTU", rtu, RTU(buf).Fields())

		dreq := DREQFields{LocalCommID: g.u32(), RemoteCommID: g.u32(), RemoteQPN: g.u24(), PrivateData: g.priv(DREQPrivateDataSize)}
		DREQ(buf).Encode(&dreq)
		check("DREQ", dreq, DREQ(buf).Fields())

		drep := DREPFields{LocalCommID: g.u32(), RemoteCommID: g.u32(), PrivateData: g.priv(DREPPrivateDataSize)}
		DREP(buf).Encode(&drep)
		check("DREP", drep, DREP(buf).Fields())

		mra := MRAFields{
			LocalCommID: g.u32(), RemoteCommID: g.u32(), MessageMRAed: Msg(g.u8(2)),
			ServiceTimeout: g.u8(5), PrivateData: g.priv(MRAPrivateDataSize),
		}
		MRA(buf).Encode(&mra)
		check("MRA", mra, MRA(buf).Fields())

		sreq := SIDRREQFields{RequestID: g.u32(), PKey: g.u16(), ServiceID: g.u64(), PrivateData: g.priv(SIDRREQPrivateDataSize)}
		SIDRREQ(buf).Encode(&sreq)
		check("SIDR_REQ", sreq, SIDRREQ(buf).Fields())

		srep := SIDRREPFields{
			RequestID: g.u32(), Status: SIDRStatus(g.u8(8)), VendorID: g.u24(), QPN: g.u24(),
			ServiceID: g.u64(), QKey: g.u32(), Info: g.bytes(g.r.IntN(SIDRREPInfoSize + 1)),
			PrivateData: g.priv(SIDRREPPrivateDataSize),
		}
		SIDRREP(buf).Encode(&srep)
		check("SIDR_REP", srep, SIDRREP(buf).Fields())

		var a4 [4]byte
		g.fill(a4[:])
		cma := CMAHeaderFields{Src: netip.AddrFrom4(a4), Dst: netip.AddrFrom4([4]byte(g.bytes(4))), SrcPort: g.u16()}
		CMAHeader(buf).Encode(&cma)
		check("CMA header v4", cma, CMAHeader(buf).Fields())
		cma = CMAHeaderFields{Src: netip.AddrFrom16(g.gid()), Dst: netip.AddrFrom16(g.gid()), SrcPort: g.u16()}
		CMAHeader(buf).Encode(&cma)
		check("CMA header v6", cma, CMAHeader(buf).Fields())

		h := Header{
			BaseVersion: g.u8(8), MgmtClass: g.u8(8), ClassVersion: g.u8(8), Method: g.u8(8),
			Status: g.u16(), ClassSpecific: g.u16(), TransactionID: g.u64(),
			AttributeID: AttrID(g.u16()), AttributeModifier: g.u32(),
		}
		m := MAD(make([]byte, Size))
		m.EncodeHeader(&h)
		check("header", h, m.Header())
	}
}

// Setters of the MAD header and the CMA header change only their field.
func TestSetters(t *testing.T) {
	m := MAD(bytes.Repeat([]byte{0x5a}, Size))
	m.SetBaseVersion(1)
	m.SetMgmtClass(7)
	m.SetClassVersion(2)
	m.SetMethod(3)
	m.SetStatus(0x1234)
	m.SetClassSpecific(0x5678)
	m.SetTransactionID(0x0102030405060708)
	m.SetAttributeID(AttrDREQ)
	m.SetAttributeModifier(0x090a0b0c)
	want := Header{1, 7, 2, 3, 0x1234, 0x5678, 0x0102030405060708, AttrDREQ, 0x090a0b0c}
	if m.Header() != want || m[18] != 0x5a || m[19] != 0x5a || m[HeaderSize] != 0x5a {
		t.Errorf("setters: %+v, reserved %x", m.Header(), m[18:20])
	}
	h := CMAHeader(bytes.Repeat([]byte{0x0f}, CMAHeaderSize))
	h.SetIPVersion(4)
	h.SetSrc(netip.MustParseAddr("1.2.3.4"))
	if h[1] != 0x4f || h.Src() != netip.MustParseAddr("1.2.3.4") || !bytes.Equal(h[4:16], make([]byte, 12)) {
		t.Errorf("SetIPVersion/SetSrc: %x", []byte(h))
	}
}
