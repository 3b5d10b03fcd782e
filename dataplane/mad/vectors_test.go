package mad

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"
)

// Known answers: each message is written byte by byte from the offsets of
// include/rdma/ibta_vol1_c12.h (CM_FIELD*_LOC(struct, byte, bits)), then
// read back with the getters and rebuilt with Encode.

var (
	gidA = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 10} // ::ffff:192.168.1.10
	gidB = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 20} // ::ffff:192.168.1.20
)

func TestHeaderVector(t *testing.T) {
	want := make([]byte, Size)
	copy(want, []byte{
		0x01,       // base version (ib_mad_hdr.base_version)
		0x07,       // management class CM
		0x02,       // class version 2
		0x03,       // method Send
		0x00, 0x00, // status
		0x00, 0x00, // class specific
		0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, // transaction ID
		0x00, 0x10, // attribute ID REQ
		0x00, 0x00, // reserved
		0xca, 0xfe, 0x00, 0x01, // attribute modifier
	})
	m := MAD(make([]byte, Size))
	h := CMHeader(AttrREQ, 0x123456789abcdef0)
	h.AttributeModifier = 0xcafe0001
	m.EncodeHeader(&h)
	if !bytes.Equal(m, want) {
		t.Fatalf("EncodeHeader\n got %x\nwant %x", m[:HeaderSize], want[:HeaderSize])
	}
	p, err := ParseCM(want)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Header(); got != h {
		t.Errorf("Header() = %+v, want %+v", got, h)
	}
	if len(p.Data()) != DataSize || &p.Data()[0] != &want[HeaderSize] {
		t.Error("Data() is not the 232 bytes after the header")
	}
}

func TestREQVector(t *testing.T) {
	data := kat(t,
		0, "11223344", // CM_REQ_LOCAL_COMM_ID (0, 32)
		5, "0a0b0c", // CM_REQ_VENDOR_ID (5, 24)
		8, "0000000001061c06", // CM_REQ_SERVICE_ID (8): RDMA_PS_TCP, port 7174 (rping)
		16, "0002c9fffe123456", // CM_REQ_LOCAL_CA_GUID (16)
		28, "deadbeef", // CM_REQ_LOCAL_Q_KEY (28, 32)
		32, "000011 10", // CM_REQ_LOCAL_QPN (32, 24), CM_REQ_RESPONDER_RESOURCES (35, 8)
		36, "000022 08", // CM_REQ_LOCAL_EECN (36, 24), CM_REQ_INITIATOR_DEPTH (39, 8)
		40, "000033", // CM_REQ_REMOTE_EECN (40, 24)
		43, "a3", // remote CM resp timeout 20 (43, 5) | transport UC (43, bit 5, 2) | E2E (43, bit 7)
		44, "abcdef", // CM_REQ_STARTING_PSN (44, 24)
		47, "a7", // local CM response timeout 20 (47, 5) | retry count 7 (47, bit 5, 3)
		48, "ffff", // CM_REQ_PARTITION_KEY (48, 16)
		50, "3f", // path MTU 1024 (50, 4) | RDC exists (50, bit 4) | RNR retry 7 (50, bit 5, 3)
		51, "f9", // max CM retries 15 (51, 4) | SRQ (51, bit 4) | extended transport 1 (51, bit 5, 3)
		52, "ffff ffff", // primary local/remote port LID (52, 54): permissive
		56, "00000000000000000000ffffc0a8010a", // CM_REQ_PRIMARY_LOCAL_PORT_GID (56, 128)
		72, "00000000000000000000ffffc0a80114", // CM_REQ_PRIMARY_REMOTE_PORT_GID (72, 128)
		88, "123450 03", // flow label 0x12345 (88, 20) | packet rate 3 (91, bit 2, 6)
		92, "20 40", // CM_REQ_PRIMARY_TRAFFIC_CLASS (92), CM_REQ_PRIMARY_HOP_LIMIT (93)
		94, "50", // SL 5 (94, 4), subnet local 0 (94, bit 4)
		95, "98", // CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT (95, 5): 19
		96, "0001 0002", // alternate local/remote LID (96, 98)
		100, "fe800000000000000000000000000001", // CM_REQ_ALTERNATE_LOCAL_PORT_GID (100, 128)
		116, "fe800000000000000000000000000002", // CM_REQ_ALTERNATE_REMOTE_PORT_GID (116, 128)
		132, "fffff0 3f", // alternate flow label 0xfffff (132, 20) | rate 63 (135, bit 2, 6)
		136, "ff 01", // alternate traffic class, hop limit (136, 137)
		138, "f8", // alternate SL 15 (138, 4) | subnet local (138, bit 4)
		139, "fc", // alternate local ACK timeout 31 (139, 5) | SAP supported (139, bit 5)
		140, "00 40 9a3f", // private data: cma_hdr version 0, IP version 4 (high nibble), port
		156, "c0a8010a", // cma_hdr.src_addr.ip4.addr: last 4 of 16 bytes
		172, "c0a80114", // cma_hdr.dst_addr.ip4.addr
		231, "ee", // last byte of the 92 bytes of private data
	)
	want := REQFields{
		LocalCommID: 0x11223344, VendorID: 0x0a0b0c, ServiceID: 0x01061c06,
		LocalCAGUID: 0x0002c9fffe123456, LocalQKey: 0xdeadbeef, LocalQPN: 0x11,
		ResponderResources: 0x10, LocalEECN: 0x22, InitiatorDepth: 8, RemoteEECN: 0x33,
		RemoteCMResponseTimeout: 20, Transport: TransportUC, EndToEndFlowControl: true,
		StartingPSN: 0xabcdef, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff,
		PathMTU: MTU1024, RDCExists: true, RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true,
		ExtendedTransportType: 1,
		Primary: PathFields{
			LocalLID: PermissiveLID, RemoteLID: PermissiveLID, LocalGID: gidA, RemoteGID: gidB,
			FlowLabel: 0x12345, PacketRate: 3, TrafficClass: 0x20, HopLimit: 64, SL: 5,
			LocalACKTimeout: 19,
		},
		Alternate: PathFields{
			LocalLID: 1, RemoteLID: 2,
			LocalGID:  [16]byte{0: 0xfe, 1: 0x80, 15: 1},
			RemoteGID: [16]byte{0: 0xfe, 1: 0x80, 15: 2},
			FlowLabel: 0xfffff, PacketRate: 63, TrafficClass: 0xff, HopLimit: 1, SL: 15,
			SubnetLocal: true, LocalACKTimeout: 31,
		},
		SAPSupported: true,
		PrivateData:  data[140:],
	}
	r := REQ(data)
	if got := r.Fields(); !reflect.DeepEqual(got, want) {
		t.Errorf("Fields()\n got %+v\nwant %+v", got, want)
	}
	if len(r.PrivateData()) != REQPrivateDataSize || REQPrivateDataSize != 92 {
		t.Errorf("REQ private data %d bytes, want 92", len(r.PrivateData()))
	}
	h := CMAHeader(r.PrivateData())
	if h.Version() != 0 || h.IPVersion() != 4 || h.Port() != 0x9a3f ||
		h.Src() != netip.MustParseAddr("192.168.1.10") || h.Dst() != netip.MustParseAddr("192.168.1.20") {
		t.Errorf("CMA header %+v", h.Fields())
	}
	out := REQ(make([]byte, DataSize))
	out.Encode(&want)
	if !bytes.Equal(out, data) {
		t.Errorf("Encode\n got %x\nwant %x", []byte(out), data)
	}
}

func TestREPVector(t *testing.T) {
	data := kat(t,
		0, "a1a2a3a4", // CM_REP_LOCAL_COMM_ID (0, 32)
		4, "11223344", // CM_REP_REMOTE_COMM_ID (4, 32)
		8, "01234567", // CM_REP_LOCAL_Q_KEY (8, 32)
		12, "000012 ab", // CM_REP_LOCAL_QPN (12, 24), CM_REP_VENDOR_ID_H (15, 8)
		16, "000034 cd", // CM_REP_LOCAL_EE_CONTEXT_NUMBER (16, 24), CM_REP_VENDOR_ID_M (19, 8)
		20, "654321 ef", // CM_REP_STARTING_PSN (20, 24), CM_REP_VENDOR_ID_L (23, 8)
		24, "04 05", // CM_REP_RESPONDER_RESOURCES (24), CM_REP_INITIATOR_DEPTH (25)
		26, "7d", // target ACK delay 15 (26, 5) | failover accepted 2 (26, bit 5, 2) | E2E (26, bit 7)
		27, "f0", // RNR retry count 7 (27, 3) | SRQ (27, bit 3)
		28, "0002c9fffe654321", // CM_REP_LOCAL_CA_GUID (28): unaligned
		36, "5a", 231, "a5", // first and last of the 196 bytes of private data
	)
	want := REPFields{
		LocalCommID: 0xa1a2a3a4, RemoteCommID: 0x11223344, LocalQKey: 0x01234567,
		LocalQPN: 0x12, LocalEECN: 0x34, StartingPSN: 0x654321, VendorID: 0xabcdef,
		ResponderResources: 4, InitiatorDepth: 5, TargetACKDelay: 15, FailoverAccepted: 2,
		EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x0002c9fffe654321,
		PrivateData: data[36:],
	}
	r := REP(data)
	if got := r.Fields(); !reflect.DeepEqual(got, want) {
		t.Errorf("Fields()\n got %+v\nwant %+v", got, want)
	}
	if REPPrivateDataSize != 196 || len(r.PrivateData()) != 196 {
		t.Errorf("REP private data %d bytes, want 196", len(r.PrivateData()))
	}
	out := REP(make([]byte, DataSize))
	out.Encode(&want)
	if !bytes.Equal(out, data) {
		t.Errorf("Encode\n got %x\nwant %x", []byte(out), data)
	}
}

func TestREJVector(t *testing.T) {
	data := kat(t,
		0, "00000000", // CM_REJ_LOCAL_COMM_ID: 0, as cm_issue_rej answers a REQ
		4, "11223344", // CM_REJ_REMOTE_COMM_ID (4, 32)
		8, "40", // CM_REJ_MESSAGE_REJECTED (8, 2): REP
		9, "10", // CM_REJ_REJECTED_INFO_LENGTH (9, 7): 8
		10, "0004", // CM_REJ_REASON (10, 16): timeout
		12, "0002c9fffe123456", // CM_REJ_ARI (12, 576): the CA GUID, as with IB_CM_REJ_TIMEOUT
		84, "01", 231, "02", // first and last of the 148 bytes of private data
	)
	want := REJFields{
		RemoteCommID: 0x11223344, MessageRejected: MsgREP, Reason: RejectTimeout,
		ARI: data[12:20], PrivateData: data[84:],
	}
	r := REJ(data)
	if got := r.Fields(); !reflect.DeepEqual(got, want) {
		t.Errorf("Fields()\n got %+v\nwant %+v", got, want)
	}
	if ARISize != 72 || REJPrivateDataSize != 148 || len(r.PrivateData()) != 148 {
		t.Errorf("REJ sizes: ARI %d private %d", ARISize, len(r.PrivateData()))
	}
	out := REJ(make([]byte, DataSize))
	out.Encode(&want)
	if !bytes.Equal(out, data) {
		t.Errorf("Encode\n got %x\nwant %x", []byte(out), data)
	}
	// A reject info length past the 72 bytes of ARI is cut, not trusted.
	data[9] = 0xfe
	if n := len(REJ(data).ARI()); n != ARISize || REJ(data).RejectInfoLength() != 127 {
		t.Errorf("ARI of length 127: %d bytes", n)
	}
}

func TestShortMessageVectors(t *testing.T) {
	priv := seq(1, 224)
	rtu := kat(t, 0, "01020304", 4, "05060708", 8, "0102") // CM_RTU_*: IDs, private data at 8
	copy(rtu[8:], priv)
	if f := RTU(rtu).Fields(); f.LocalCommID != 0x01020304 || f.RemoteCommID != 0x05060708 ||
		!bytes.Equal(f.PrivateData, priv) || RTUPrivateDataSize != 224 {
		t.Errorf("RTU %+v", f)
	}
	rf := RTU(rtu).Fields()
	out := make([]byte, DataSize)
	RTU(out).Encode(&rf)
	if !bytes.Equal(out, rtu) {
		t.Error("RTU Encode differs")
	}

	dreq := kat(t, 0, "0a0b0c0d", 4, "01020304", 8, "abcdef", 12, "77", 231, "88") // remote QPN (8, 24), private at 12
	want := DREQFields{LocalCommID: 0x0a0b0c0d, RemoteCommID: 0x01020304, RemoteQPN: 0xabcdef, PrivateData: dreq[12:]}
	if got := DREQ(dreq).Fields(); !reflect.DeepEqual(got, want) || DREQPrivateDataSize != 220 {
		t.Errorf("DREQ %+v", got)
	}
	DREQ(out).Encode(&want)
	if !bytes.Equal(out, dreq) {
		t.Error("DREQ Encode differs")
	}

	drep := kat(t, 0, "0a0b0c0d", 4, "01020304", 8, "99", 231, "66")
	wantDREP := DREPFields{LocalCommID: 0x0a0b0c0d, RemoteCommID: 0x01020304, PrivateData: drep[8:]}
	if got := DREP(drep).Fields(); !reflect.DeepEqual(got, wantDREP) || DREPPrivateDataSize != 224 {
		t.Errorf("DREP %+v", got)
	}
	DREP(out).Encode(&wantDREP)
	if !bytes.Equal(out, drep) {
		t.Error("DREP Encode differs")
	}

	mra := kat(t,
		0, "0a0b0c0d", 4, "00000000",
		8, "40", // CM_MRA_MESSAGE_MRAED (8, 2): REP
		9, "c0", // CM_MRA_SERVICE_TIMEOUT (9, 5): 24, rdma_cm's CMA_CM_MRA_SETTING
		10, "31", 231, "32", // private data 10..231
	)
	wantMRA := MRAFields{LocalCommID: 0x0a0b0c0d, MessageMRAed: MsgREP, ServiceTimeout: 24, PrivateData: mra[10:]}
	if got := MRA(mra).Fields(); !reflect.DeepEqual(got, wantMRA) || MRAPrivateDataSize != 222 {
		t.Errorf("MRA %+v", got)
	}
	MRA(out).Encode(&wantMRA)
	if !bytes.Equal(out, mra) {
		t.Error("MRA Encode differs")
	}
}

func TestSIDRVectors(t *testing.T) {
	req := kat(t,
		0, "01020304", // CM_SIDR_REQ_REQUESTID (0, 32)
		4, "ffff", // CM_SIDR_REQ_PARTITION_KEY (4, 16)
		8, "0000000001110035", // CM_SIDR_REQ_SERVICEID (8): RDMA_PS_UDP, port 53
		16, "0060", // private data at 16: cma_hdr for IPv6
		231, "ff",
	)
	want := SIDRREQFields{RequestID: 0x01020304, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 53), PrivateData: req[16:]}
	if got := SIDRREQ(req).Fields(); !reflect.DeepEqual(got, want) || SIDRREQPrivateDataSize != 216 {
		t.Errorf("SIDR_REQ %+v", got)
	}
	out := make([]byte, DataSize)
	SIDRREQ(out).Encode(&want)
	if !bytes.Equal(out, req) {
		t.Error("SIDR_REQ Encode differs")
	}

	rep := kat(t,
		0, "01020304", // CM_SIDR_REP_REQUESTID (0, 32)
		4, "01", // CM_SIDR_REP_STATUS (4, 8): unsupported
		5, "03", // CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH (5, 8)
		6, "abcd", // CM_SIDR_REP_VENDOR_ID_H (6, 16)
		8, "000045 ef", // CM_SIDR_REP_QPN (8, 24), CM_SIDR_REP_VENDOR_ID_L (11, 8)
		12, "0000000001110035", // CM_SIDR_REP_SERVICEID (12): unaligned
		20, "01234567", // CM_SIDR_REP_Q_KEY (20, 32): RDMA_UDP_QKEY
		24, "aabbcc", // CM_SIDR_REP_ADDITIONAL_INFORMATION (24, 576)
		96, "42", 231, "24", // private data 96..231
	)
	wantRep := SIDRREPFields{
		RequestID: 0x01020304, Status: SIDRUnsupported, VendorID: 0xabcdef, QPN: 0x45,
		ServiceID: ServiceID(PortSpaceUDP, 53), QKey: 0x01234567, Info: rep[24:27], PrivateData: rep[96:],
	}
	if got := SIDRREP(rep).Fields(); !reflect.DeepEqual(got, wantRep) || SIDRREPPrivateDataSize != 136 || SIDRREPInfoSize != 72 {
		t.Errorf("SIDR_REP %+v", got)
	}
	SIDRREP(out).Encode(&wantRep)
	if !bytes.Equal(out, rep) {
		t.Errorf("SIDR_REP Encode\n got %x\nwant %x", out, rep)
	}
}
