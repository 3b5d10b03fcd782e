package abi

import "testing"

// hfi1-abi.md §1 "ioctls": the literal values the spec gives, which must be
// what IOC computes from direction, magic, nr and sizeof.
func TestIoctlNumbers(t *testing.T) {
	for _, c := range []struct {
		name string
		got  uint32
		want uint32
	}{
		{"ASSIGN_CTXT", IoctlAssignCtxt, 0xC01C1BE1},
		{"CTXT_INFO", IoctlCtxtInfo, 0x40281BE2},
		{"USER_INFO", IoctlUserInfo, 0x40781BE3},
		{"TID_UPDATE", IoctlTIDUpdate, 0xC0181BE4},
		{"TID_FREE", IoctlTIDFree, 0xC0181BE5},
		{"CREDIT_UPD", IoctlCreditUpd, 0x1BE6},
		{"RECV_CTRL", IoctlRecvCtrl, 0x40041BE8},
		{"POLL_TYPE", IoctlPollType, 0x40041BE9},
		{"ACK_EVENT", IoctlAckEvent, 0x40081BEA},
		{"SET_PKEY", IoctlSetPKey, 0x40021BEB},
		{"CTXT_RESET", IoctlCtxtReset, 0x1BEC},
		{"TID_INVAL_READ", IoctlTIDInvalRead, 0xC0181BED},
		{"GET_VERS", IoctlGetVers, 0x80041BEE},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#08x, spec says %#08x", c.name, c.got, c.want)
		}
		if IoctlName(c.got) != c.name {
			t.Errorf("IoctlName(%#x) = %q, want %q", c.got, IoctlName(c.got), c.name)
		}
		if IOCType(c.got) != IoctlMagic {
			t.Errorf("%s: magic %#x", c.name, IOCType(c.got))
		}
	}
}

func TestIOCFields(t *testing.T) {
	cmd := IoctlAssignCtxt
	if IOCSize(cmd) != UserInfoSize || IOCDir(cmd) != IOCRead|IOCWrite || IOCNR(cmd) != 0xE1 || IOCType(cmd) != 0x1b {
		t.Errorf("ASSIGN_CTXT decodes to size %d dir %d nr %#x type %#x",
			IOCSize(cmd), IOCDir(cmd), IOCNR(cmd), IOCType(cmd))
	}
	if IOCSize(IoctlUserInfo) != BaseInfoSize || IOCSize(IoctlCtxtInfo) != CtxtInfoSize ||
		IOCSize(IoctlCreditUpd) != 0 || IOCSize(IoctlGetVers) != 4 {
		t.Error("IOCSize disagrees with the structure sizes")
	}
	// A size that differs by one byte is a different ioctl number.
	if IOC(IOCWrite, IoctlMagic, 0xE2, CtxtInfoSize-2) == IoctlCtxtInfo {
		t.Error("size is not part of the number")
	}
}
