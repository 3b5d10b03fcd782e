package fabric_test

import (
	"bytes"
	"testing"

	"github.com/softfabric/softfabric/fabric"
)

func progressModes(t *testing.T, f func(t *testing.T, p fabric.Progress)) {
	for _, p := range []fabric.Progress{fabric.ProgressAuto, fabric.ProgressManual} {
		t.Run(p.String(), func(t *testing.T) { f(t, p) })
	}
}

// TestMsg is fabtests' fi_msg: send and receive on connected endpoints,
// data verified, with remote CQ data.
func TestMsg(t *testing.T) {
	progressModes(t, func(t *testing.T, p fabric.Progress) {
		cli := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		srv := newHost(t, hostOpts{typ: fabric.EPMsg, progress: p})
		a, b := connect(t, cli, srv)
		sm, rm := cli.mr(4096), srv.mr(4096)
		for i := range sm.Bytes() {
			sm.Bytes()[i] = byte(i * 7)
		}
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 11))
		must(t, a.Send(sm.Bytes()[:1000], sm.Desc(), fabric.AddrUnspec, 22))
		c := waitOK(t, cli.cq)
		if c.Context != 22 || c.Flags != fabric.FlagSend|fabric.FlagMsg {
			t.Fatalf("send completion %+v", c)
		}
		c = waitOK(t, srv.cq)
		if c.Context != 11 || c.Len != 1000 || c.Flags != fabric.FlagRecv|fabric.FlagMsg || !bytes.Equal(c.Buf, sm.Bytes()[:1000]) {
			t.Fatalf("recv completion %+v", c)
		}
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 12))
		must(t, a.SendData(sm.Bytes()[:10], sm.Desc(), 0xabcd, fabric.AddrUnspec, 23))
		waitOK(t, cli.cq)
		c = waitOK(t, srv.cq)
		if c.Flags&fabric.FlagRemoteCQData == 0 || c.Data != 0xabcd || c.Len != 10 {
			t.Fatalf("recv with data %+v", c)
		}
		// RMA write with data, then read back.
		must(t, b.Recv(nil, fabric.Desc{}, fabric.AddrUnspec, 13))
		must(t, a.WriteData(sm.Bytes()[:512], sm.Desc(), 7, fabric.AddrUnspec, rm.Addr()+100, rm.Key(), 24))
		waitOK(t, cli.cq)
		c = waitOK(t, srv.cq)
		if c.Flags != fabric.FlagRMA|fabric.FlagRemoteWrite|fabric.FlagRemoteCQData || c.Data != 7 || c.Context != 13 {
			t.Fatalf("write data completion %+v", c)
		}
		if !bytes.Equal(rm.Bytes()[100:612], sm.Bytes()[:512]) {
			t.Fatal("written data differ")
		}
		back := cli.mr(512)
		must(t, a.Read(back.Bytes(), back.Desc(), fabric.AddrUnspec, rm.Addr()+100, rm.Key(), 25))
		c = waitOK(t, cli.cq)
		if c.Flags != fabric.FlagRMA|fabric.FlagRead || !bytes.Equal(back.Bytes(), sm.Bytes()[:512]) {
			t.Fatalf("read %+v", c)
		}
		// Inject: no completion, buffer reusable at once.
		must(t, b.Recv(rm.Bytes(), rm.Desc(), fabric.AddrUnspec, 14))
		msg := []byte("injected")
		must(t, a.Inject(msg, fabric.AddrUnspec))
		copy(msg, "XXXXXXXX")
		c = waitOK(t, srv.cq)
		if string(c.Buf) != "injected" {
			t.Fatalf("inject delivered %q", c.Buf)
		}
		// A bad rkey: the IBTA remote access NAK, as ErrRemoteAccess.
		must(t, a.Write(sm.Bytes()[:8], sm.Desc(), fabric.AddrUnspec, rm.Addr(), rm.Key()^0x100, 26))
		c = wait(t, cli.cq)
		if c.Status != fabric.StatusRemoteAccess {
			t.Fatalf("bad rkey: %+v", c)
		}
	})
}
