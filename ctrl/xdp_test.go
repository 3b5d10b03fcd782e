package ctrl

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/softfabric/softfabric/internal/netnstest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// loadXDPPass loads `r0 = XDP_PASS; exit` and returns its fd and id.
func loadXDPPass(t *testing.T) (fd int, id uint32) {
	t.Helper()
	insns := []uint64{
		0x00000002_000000b7, // BPF_ALU64|BPF_MOV|BPF_K r0, 2
		0x00000000_00000095, // BPF_JMP|BPF_EXIT
	}
	license := []byte("GPL\x00")
	var load struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		progFlags         uint32
		name              [16]byte
	}
	load.progType = unix.BPF_PROG_TYPE_XDP
	load.insnCnt = uint32(len(insns))
	load.insns = uint64(uintptr(unsafe.Pointer(&insns[0])))
	load.license = uint64(uintptr(unsafe.Pointer(&license[0])))
	copy(load.name[:], "ctrl_test")
	r, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(&load)), unsafe.Sizeof(load))
	if errno != 0 {
		t.Fatalf("BPF_PROG_LOAD: %v", errno)
	}
	fd = int(r)
	t.Cleanup(func() { unix.Close(fd) })
	var info struct{ typ, id uint32 }
	get := struct {
		fd, infoLen uint32
		info        uint64
	}{uint32(fd), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info)))}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&get)), unsafe.Sizeof(get)); errno != 0 {
		t.Fatalf("BPF_OBJ_GET_INFO_BY_FD: %v", errno)
	}
	return fd, info.id
}

func TestLookupDeviceXDP(t *testing.T) {
	t.Parallel()
	p := netnstest.NewPair(t, netnstest.Options{})
	fd, id := loadXDPPass(t)
	err := p.A.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		check := func(step, mode string) error {
			d, err := LookupDevice("eth0")
			if err != nil {
				return err
			}
			if d.XDPProgID != id || d.XDPMode != mode {
				return fmt.Errorf("%s: XDP prog %d %q, want %d %q", step, d.XDPProgID, d.XDPMode, id, mode)
			}
			return nil
		}
		// Native and generic cannot be attached together (EEXIST since
		// Linux 5.x): XDP_ATTACHED_MULTI needs an offloading NIC.
		for _, s := range []struct {
			mode  string
			flags int
		}{{"generic", nl.XDP_FLAGS_SKB_MODE}, {"native", nl.XDP_FLAGS_DRV_MODE}} {
			if err := netlink.LinkSetXdpFdWithFlags(link, fd, s.flags); err != nil {
				return fmt.Errorf("attaching %s: %w", s.mode, err)
			}
			if err := check(s.mode, s.mode); err != nil {
				return err
			}
			if err := netlink.LinkSetXdpFdWithFlags(link, -1, s.flags); err != nil {
				return fmt.Errorf("detaching %s: %w", s.mode, err)
			}
			d, err := LookupDevice("eth0")
			if err != nil {
				return err
			}
			if d.XDPProgID != 0 || d.XDPMode != "" {
				return fmt.Errorf("detached %s: XDP prog %d %q", s.mode, d.XDPProgID, d.XDPMode)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestXDPFromLinkMsg(t *testing.T) {
	msg := func(ids map[int]uint32) []byte {
		b := nl.NewIfInfomsg(unix.AF_UNSPEC).Serialize()
		b = append(b, nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(1500)).Serialize()...)
		x := nl.NewRtAttr(unix.IFLA_XDP|unix.NLA_F_NESTED, nil)
		x.AddRtAttr(unix.IFLA_XDP_ATTACHED, []byte{xdpAttachedMulti})
		for _, attr := range []int{unix.IFLA_XDP_HW_PROG_ID, unix.IFLA_XDP_SKB_PROG_ID, unix.IFLA_XDP_DRV_PROG_ID} {
			if id, ok := ids[attr]; ok {
				x.AddRtAttr(attr, nl.Uint32Attr(id))
			}
		}
		return append(b, x.Serialize()...)
	}
	for _, tc := range []struct {
		ids  map[int]uint32
		id   uint32
		mode string
	}{
		{map[int]uint32{unix.IFLA_XDP_HW_PROG_ID: 9, unix.IFLA_XDP_DRV_PROG_ID: 5}, 5, "native"},
		{map[int]uint32{unix.IFLA_XDP_HW_PROG_ID: 9, unix.IFLA_XDP_SKB_PROG_ID: 7}, 7, "generic"},
		{map[int]uint32{unix.IFLA_XDP_HW_PROG_ID: 9}, 9, "offload"},
		{nil, 0, ""},
	} {
		id, mode, err := xdpFromLinkMsg(msg(tc.ids))
		if err != nil || id != tc.id || mode != tc.mode {
			t.Errorf("%v: %d %q %v, want %d %q", tc.ids, id, mode, err, tc.id, tc.mode)
		}
	}
	if _, _, err := xdpFromLinkMsg(make([]byte, 4)); err == nil {
		t.Error("short message accepted")
	}
}
