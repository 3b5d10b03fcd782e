package perftest

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/softfabric/softfabric/fabric"
)

// TestDestCM: struct pingpong_dest as rdma_write_keys sends it on x86-64
// with HAVE_ENDIAN: each int big-endian, 4 bytes of padding before vaddr,
// 56 bytes in all.
func TestDestCM(t *testing.T) {
	d := Dest{LID: 0, OutReads: 16, QPInfo: fabric.QPInfo{QPN: 0x4c, PSN: 0x1ebedd, GID: netip.MustParseAddr("::ffff:198.18.1.2")},
		RKey: 0x1234abcd, VA: 0x7f0011223344, SRQN: 0}
	want, _ := hex.DecodeString("00000000" + "00000010" + "0000004c" + "001ebedd" + "1234abcd" + "00000000" +
		"00007f0011223344" + "00000000000000000000ffffc6120102" + "00000000" + "00000000")
	got := d.MarshalCM()
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalCM\n got %x\nwant %x", got, want)
	}
	back, err := ParseDestCM(got)
	if err != nil || back != d {
		t.Fatalf("ParseDestCM = %+v, %v; want %+v", back, err, d)
	}
	if _, err := ParseDestCM(got[:20]); err == nil {
		t.Fatal("a short key message parsed")
	}
	// The QPN and PSN are 24 bits, whatever the upper byte says.
	got[8], got[12] = 0xff, 0xff
	if back, _ := ParseDestCM(got); back.QPN != 0x4c || back.PSN != 0x1ebedd {
		t.Fatalf("24-bit fields: %+v", back)
	}
}

// TestConnKeyFormat: a Conn in the RDMA-CM mode exchanges binary key
// messages and closes without "done".
func TestConnKeyFormat(t *testing.T) {
	c := &Conn{CM: true}
	if c.KeySize() != CMKeyMsgSize || len(c.MarshalKey(Dest{})) != CMKeyMsgSize {
		t.Fatal("CM key size")
	}
	c.CM = false
	if c.KeySize() != KeyMsgSize || len(c.MarshalKey(Dest{})) != KeyMsgSize {
		t.Fatal("TCP key size")
	}
}
