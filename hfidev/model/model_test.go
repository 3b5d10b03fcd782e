package model

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
)

func newUnit(t *testing.T, cfg Config) *Unit {
	t.Helper()
	u, err := NewUnit(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func open(t *testing.T, u *Unit) int {
	t.Helper()
	fd, err := u.Open(u.Path(), unix.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func assign(t *testing.T, u *Unit, fd int) {
	t.Helper()
	if err := assignErr(u, fd, abi.UserInfo{UserVersion: abi.UserVersion}); err != nil {
		t.Fatal(err)
	}
}

func assignErr(u *Unit, fd int, ui abi.UserInfo) error {
	b := make([]byte, abi.UserInfoSize)
	ui.Marshal(b)
	return u.Ioctl(fd, abi.IoctlAssignCtxt, b)
}

func info(t *testing.T, u *Unit, fd int) (abi.CtxtInfo, abi.BaseInfo) {
	t.Helper()
	var ci abi.CtxtInfo
	var bi abi.BaseInfo
	b := make([]byte, abi.BaseInfoSize)
	if err := u.Ioctl(fd, abi.IoctlCtxtInfo, b[:abi.CtxtInfoSize]); err != nil {
		t.Fatal(err)
	}
	ci.Unmarshal(b)
	if err := u.Ioctl(fd, abi.IoctlUserInfo, b); err != nil {
		t.Fatal(err)
	}
	bi.Unmarshal(b)
	return ci, bi
}

func TestOpenPath(t *testing.T) {
	u := newUnit(t, DefaultConfig(abi.ChipWFR))
	if u.Path() != "model:hfi1_0" {
		t.Errorf("path %q", u.Path())
	}
	if _, err := u.Open("/dev/hfi1_0", unix.O_RDWR); !errors.Is(err, unix.ENOENT) {
		t.Errorf("the model answered for a real path: %v", err)
	}
}

// hfi1-abi.md §1 "ioctls": GET_VERS before a context; everything else but
// ASSIGN_CTXT is EINVAL until one exists; unknown numbers are EINVAL.
func TestIoctlBeforeAssign(t *testing.T) {
	u := newUnit(t, DefaultConfig(abi.ChipWFR))
	fd := open(t, u)
	v := make([]byte, 4)
	if err := u.Ioctl(fd, abi.IoctlGetVers, v); err != nil || le.Uint32(v) != 0x00060003 {
		t.Errorf("GET_VERS = %#x, %v", le.Uint32(v), err)
	}
	for _, cmd := range []uint32{abi.IoctlCtxtInfo, abi.IoctlUserInfo, abi.IoctlCreditUpd,
		abi.IoctlTIDUpdate, abi.IoctlCtxtReset, abi.IoctlSetPKey, abi.IoctlRecvCtrl, abi.IoctlPollType} {
		if err := u.Ioctl(fd, cmd, make([]byte, abi.IOCSize(cmd))); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s before ASSIGN_CTXT: %v, want EINVAL", abi.IoctlName(cmd), err)
		}
	}
	assign(t, u, fd)
	// A CTXT_INFO number with another size is another (unknown) ioctl.
	bad := abi.IOC(abi.IOCWrite, abi.IoctlMagic, 0xE2, abi.CtxtInfoSize-2)
	if err := u.Ioctl(fd, bad, make([]byte, 64)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("CTXT_INFO with size 38: %v", err)
	}
	if err := u.Ioctl(fd, abi.IoctlCtxtInfo, make([]byte, abi.CtxtInfoSize-1)); !errors.Is(err, unix.EFAULT) {
		t.Errorf("short buffer: %v", err)
	}
	if err := u.Ioctl(fd, abi.IoctlSetPKey, make([]byte, 2)); !errors.Is(err, ErrNotModeled) {
		t.Errorf("SET_PKEY: %v, want ErrNotModeled", err)
	}
	if err := u.Ioctl(99, abi.IoctlGetVers, v); !errors.Is(err, unix.EBADF) {
		t.Errorf("bad fd: %v", err)
	}
}

// ASSIGN_CTXT's checks in the driver's order ([K] assign_ctxt,
// hfi1_do_assign_ctxt).
func TestAssignCtxtErrors(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	cfg.UserContexts = 2
	u := newUnit(t, cfg)
	fd := open(t, u)
	for _, c := range []struct {
		name string
		ui   abi.UserInfo
		want error
	}{
		{"major 5", abi.UserInfo{UserVersion: 5<<16 | 3}, unix.ENODEV},
		{"major 7", abi.UserInfo{UserVersion: 7 << 16}, unix.ENODEV},
		{"port 1 of 1", abi.UserInfo{UserVersion: abi.UserVersion, Pad: 1}, unix.EINVAL},
		{"kdeth hdr 1", abi.UserInfo{UserVersion: abi.UserVersion, Pad: 1 << 1}, unix.EINVAL},
		{"pad bit 6", abi.UserInfo{UserVersion: abi.UserVersion, Pad: 1 << 6}, unix.EINVAL},
		{"subctxt_cnt 9", abi.UserInfo{UserVersion: abi.UserVersion, SubctxtCnt: 9}, unix.EINVAL},
		{"subctxt_cnt 2", abi.UserInfo{UserVersion: abi.UserVersion, SubctxtCnt: 2}, ErrNotModeled},
	} {
		if err := assignErr(u, fd, c.ui); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Minor versions are compatible; a KDETH header size of 2 is fine.
	if err := assignErr(u, fd, abi.UserInfo{UserVersion: 6<<16 | 99, Pad: 2 << 1}); err != nil {
		t.Fatalf("minor 99: %v", err)
	}
	if err := assignErr(u, fd, abi.UserInfo{UserVersion: abi.UserVersion}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("second ASSIGN_CTXT: %v", err)
	}
	fd2 := open(t, u)
	assign(t, u, fd2)
	fd3 := open(t, u)
	if err := assignErr(u, fd3, abi.UserInfo{UserVersion: abi.UserVersion}); !errors.Is(err, unix.EBUSY) {
		t.Errorf("third context of two: %v", err)
	}
	if err := u.Close(fd); err != nil {
		t.Fatal(err)
	}
	assign(t, u, fd3) // the freed context is reused
	if err := u.Close(fd); !errors.Is(err, unix.EBADF) {
		t.Errorf("double close: %v", err)
	}
}

func TestInfo(t *testing.T) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		cfg := DefaultConfig(chip)
		cfg.Unit = 1
		u := newUnit(t, cfg)
		open(t, u) // fd without a context, to make the second one ctxt idx 1
		fd0 := open(t, u)
		assign(t, u, fd0)
		fd := open(t, u)
		assign(t, u, fd)
		ci, bi := info(t, u, fd)
		want := abi.CtxtInfo{RuntimeFlags: cfg.Caps, RcvEgrSize: 32768, NumActive: 1, Unit: 1,
			Ctxt: 4, RcvTIDs: 2048, Credits: 161, RecCPU: 0xffff, SendCtxt: 11, EgrTIDs: 256,
			RcvHdrqCnt: 2048, RcvHdrqEntSize: 128, SDMARingSize: 128}
		if ci != want {
			t.Errorf("%v CTXT_INFO\n got %+v\nwant %+v", chip, ci, want)
		}
		if bi.HWVersion.Chip() != chip || bi.SWVersion != abi.UserVersion || bi.BTHQP != 0x80 || bi.JKey != cfg.JKey {
			t.Errorf("%v USER_INFO head %+v", chip, bi)
		}
		// Credit word of send context 11 sits at 11×64 + (11&7)×8 = 728 in
		// its page; event word of context index 1, subcontext 0 at 64.
		if bi.SCCreditsAddr.PageOffset() != 728 || bi.EventsBufBase.PageOffset() != 64 {
			t.Errorf("offsets: credit %d events %d", bi.SCCreditsAddr.PageOffset(), bi.EventsBufBase.PageOffset())
		}
		if bi.RcvHdrTailBase != 0 || bi.SubctxtURegBase != 0 {
			t.Error("tokens for absent regions")
		}
		for _, tok := range []abi.Token{bi.PIOBufBase, bi.PIOBufBaseSOP, bi.RcvHdrBufBase, bi.UserRegBase, bi.SDMACompBufBase} {
			if !tok.Valid() || tok.Ctxt() != 4 || tok.Subctxt() != 0 {
				t.Errorf("token %#x", uint64(tok))
			}
		}
	}
}

type mmapCase struct {
	name   string
	tok    abi.Token
	length int
	prot   int
	flags  int
	want   error
}

// hfi1-abi.md §1 "mmap token" table and [K] hfi1_file_mmap/hfi1_do_mmap.
func TestMmapChecks(t *testing.T) {
	cfg := DefaultConfig(abi.ChipWFR)
	u := newUnit(t, cfg)
	fd := open(t, u)

	tokPIO := abi.MakeToken(abi.MmapPIOBufs, 3, 0, 0)
	if _, err := u.Mmap(fd, tokPIO.MapOffset(), 12288, unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EINVAL) {
		t.Errorf("mmap before ASSIGN_CTXT: %v", err)
	}
	assign(t, u, fd)
	ci, bi := info(t, u, fd)
	R, W, RW, S := unix.PROT_READ, unix.PROT_WRITE, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED
	pio := abi.RegionLen(abi.MmapPIOBufs, &ci, cfg.Chip)
	hdrq := abi.RegionLen(abi.MmapRcvHdrQ, &ci, cfg.Chip)
	egr := abi.RegionLen(abi.MmapRcvEgrBuf, &ci, cfg.Chip)
	page := abi.PageSize
	mk := func(ty abi.MmapType) abi.Token { return abi.MakeToken(ty, ci.Ctxt, 0, 0) }
	for _, c := range []mmapCase{
		{"PIO", bi.PIOBufBase, pio, W, S, nil},
		{"PIO SOP", bi.PIOBufBaseSOP, pio, W, S, nil},
		{"PIO readable (driver allows)", bi.PIOBufBase, pio, RW, S, nil},
		{"PIO short", bi.PIOBufBase, pio - page, W, S, unix.EINVAL},
		{"PIO long", bi.PIOBufBaseSOP, pio + page, W, S, unix.EINVAL},
		{"credit", bi.SCCreditsAddr, page, R, S, nil},
		{"credit writable", bi.SCCreditsAddr, page, RW, S, unix.EPERM},
		{"credit writable and long", bi.SCCreditsAddr, 2 * page, RW, S, unix.EPERM},
		{"credit long", bi.SCCreditsAddr, 2 * page, R, S, unix.EINVAL},
		{"hdrq", bi.RcvHdrBufBase, hdrq, R, S, nil},
		{"hdrq writable (driver allows)", bi.RcvHdrBufBase, hdrq, RW, S, nil},
		{"hdrq short", bi.RcvHdrBufBase, hdrq - page, R, S, unix.EINVAL},
		{"eager", bi.RcvEgrBufBase, egr, R, S, nil},
		{"eager writable", bi.RcvEgrBufBase, egr, RW, S, unix.EPERM},
		{"eager writable and short: size first", bi.RcvEgrBufBase, egr - page, RW, S, unix.EINVAL},
		{"uregs", bi.UserRegBase, page, RW, S, nil},
		{"uregs 8K on WFR", bi.UserRegBase, 2 * page, RW, S, unix.EINVAL},
		{"events", bi.EventsBufBase, page, R, S, nil},
		{"events long", bi.EventsBufBase, 2 * page, R, S, unix.EINVAL},
		{"status", bi.StatusBufBase, page, R, S, nil},
		{"status writable", bi.StatusBufBase, page, RW, S, unix.EPERM},
		{"rtail without DMA_RTAIL", mk(abi.MmapRTail), page, R, S, unix.EINVAL},
		{"sdma comp", bi.SDMACompBufBase, page, R, S, nil},
		{"sdma comp long", bi.SDMACompBufBase, 2 * page, R, S, unix.EINVAL},
		{"rheq on WFR", mk(abi.MmapRcvRHEQ), page, R, S, unix.EINVAL},
		{"subctxt uregs, not shared", mk(abi.MmapSubctxtURegs), page, R, S, unix.EINVAL},
		{"type 0", mk(0), page, R, S, unix.EINVAL},
		{"type 15", mk(15), page, R, S, unix.EINVAL},
		{"bad magic", bi.RcvHdrBufBase ^ 1<<40, hdrq, R, S, unix.EINVAL},
		{"other ctxt", abi.MakeToken(abi.MmapRcvHdrQ, ci.Ctxt+1, 0, 0), hdrq, R, S, unix.EINVAL},
		{"other subctxt", abi.MakeToken(abi.MmapRcvHdrQ, ci.Ctxt, 1, 0), hdrq, R, S, unix.EINVAL},
		{"MAP_PRIVATE", bi.RcvHdrBufBase, hdrq, R, unix.MAP_PRIVATE, unix.EINVAL},
		{"no share flag", bi.RcvHdrBufBase, hdrq, R, 0, unix.EINVAL},
		{"zero length", bi.RcvHdrBufBase, 0, R, S, unix.EINVAL},
	} {
		c.run(t, u, fd)
	}
	// The in-page offset is the caller's to strip: mmap(2) wants a page-aligned offset.
	if _, err := u.Mmap(fd, int64(bi.SCCreditsAddr), page, R, S); !errors.Is(err, unix.EINVAL) {
		t.Errorf("unaligned offset: %v", err)
	}
	// Sub-page lengths round up to the page, as the vma does.
	if _, err := u.Mmap(fd, bi.StatusBufBase.MapOffset(), 100, R, S); err != nil {
		t.Errorf("100-byte status map: %v", err)
	}
}

func (c *mmapCase) run(t *testing.T, u *Unit, fd int) {
	t.Helper()
	r, err := u.Mmap(fd, c.tok.MapOffset(), c.length, c.prot, c.flags)
	if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
		t.Errorf("%s: %v, want %v", c.name, err, c.want)
		return
	}
	if err == nil {
		if r.Len() != abi.PageAlign(c.length) {
			t.Errorf("%s: region of %d bytes", c.name, r.Len())
		}
		if err := u.Munmap(r); err != nil {
			t.Errorf("%s: munmap: %v", c.name, err)
		}
	}
}

func TestMmapChipAndCaps(t *testing.T) {
	cfg := DefaultConfig(abi.ChipJKR)
	cfg.Caps = abi.CapDMARtail
	cfg.SDMARingSize = 0
	u := newUnit(t, cfg)
	fd := open(t, u)
	assign(t, u, fd)
	ci, bi := info(t, u, fd)
	if !bi.RcvHdrTailBase.Valid() || bi.RcvHdrTailBase.Type() != abi.MmapRTail {
		t.Fatalf("no RTAIL token with DMA_RTAIL: %#x", uint64(bi.RcvHdrTailBase))
	}
	R, RW, S := unix.PROT_READ, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED
	page := abi.PageSize
	rheq := abi.MakeToken(abi.MmapRcvRHEQ, ci.Ctxt, 0, 0)
	for _, c := range []mmapCase{
		{"rtail", bi.RcvHdrTailBase, page, R, S, nil},
		{"rtail writable", bi.RcvHdrTailBase, page, RW, S, unix.EPERM},
		{"uregs 8K on JKR", bi.UserRegBase, 2 * page, RW, S, nil},
		{"uregs 4K on JKR (Cornelis driver accepts)", bi.UserRegBase, page, RW, S, nil},
		{"uregs 12K on JKR", bi.UserRegBase, 3 * page, RW, S, unix.EINVAL},
		{"rheq", rheq, abi.RegionLen(abi.MmapRcvRHEQ, &ci, cfg.Chip), R, S, nil},
		{"rheq writable", rheq, abi.RegionLen(abi.MmapRcvRHEQ, &ci, cfg.Chip), RW, S, unix.EPERM},
		{"sdma comp without SDMA", bi.SDMACompBufBase, page, R, S, unix.EFAULT},
	} {
		c.run(t, u, fd)
	}
}

func TestMmapReadOnlyFile(t *testing.T) {
	u := newUnit(t, DefaultConfig(abi.ChipWFR))
	fd, err := u.Open(u.Path(), unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	assign(t, u, fd)
	_, bi := info(t, u, fd)
	if _, err := u.Mmap(fd, bi.UserRegBase.MapOffset(), abi.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EACCES) {
		t.Errorf("writable shared map of an O_RDONLY file: %v", err)
	}
}

// Mapped regions are the model's memory: what the chip writes, user space
// reads at the token's offset.
func TestRegionsShareMemory(t *testing.T) {
	u := newUnit(t, DefaultConfig(abi.ChipWFR))
	fd := open(t, u)
	assign(t, u, fd)
	_, bi := info(t, u, fd)
	c := u.files[fd].ctxt

	hdrq, err := u.Mmap(fd, bi.RcvHdrBufBase.MapOffset(), len(c.hdrq), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	storeWord(c.hdrq, 128-8, 0x1234)
	if hdrq.Load64(128-8) != 0x1234 || &hdrq.Bytes()[0] != &c.hdrq[0] {
		t.Error("hdrq mapping is not the model's memory")
	}

	cr, err := u.Mmap(fd, bi.SCCreditsAddr.MapOffset(), abi.PageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Ioctl(fd, abi.IoctlCreditUpd, nil); err != nil {
		t.Fatal(err)
	}
	w := abi.CreditReturn(cr.Load64(bi.SCCreditsAddr.PageOffset())).Decode()
	if !w.DueToForce || w.FreeCounter != 0 || w.Halted {
		t.Errorf("CREDIT_UPD: credit word %+v", w)
	}

	ev, err := u.Mmap(fd, bi.EventsBufBase.MapOffset(), abi.PageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	storeWord(u.events, u.eventOff(c, 0), 0x2)
	if ev.Load64(bi.EventsBufBase.PageOffset()) != 0x2 {
		t.Error("event word not at the token's offset")
	}
	if err := u.Close(fd); err != nil {
		t.Fatal(err)
	}
	if ev.Load64(bi.EventsBufBase.PageOffset()) != 0 {
		t.Error("close left the event word set")
	}

	pio, err := func() (r interface{ Bytes() []byte }, err error) {
		fd := open(t, u)
		assign(t, u, fd)
		_, bi := info(t, u, fd)
		return u.Mmap(fd, bi.PIOBufBaseSOP.MapOffset(), abi.PageAlign(161*64), unix.PROT_WRITE, unix.MAP_SHARED)
	}()
	if err != nil || pio.Bytes() != nil {
		t.Errorf("PIO region exposes memory or fails: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.Chip = abi.ChipCYR },
		func(c *Config) { c.UserContexts = 300 },
		func(c *Config) { c.RcvEgrSize = 1000 },
		func(c *Config) { c.SDMARingSize = 0 },
		func(c *Config) { c.Credits = 0 },
	} {
		cfg := DefaultConfig(abi.ChipWFR)
		mut(&cfg)
		if _, err := NewUnit(cfg); err == nil {
			t.Errorf("accepted %+v", cfg)
		}
	}
}
