package hfidev

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/hfidev/abi"
	"github.com/softfabric/softfabric/hfidev/model"
	"github.com/softfabric/softfabric/hfidev/sys"
)

func newModel(t *testing.T, cfg model.Config) *model.Unit {
	t.Helper()
	u, err := model.NewUnit(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The real set-up sequence against the model, on both chips: every region
// is mapped with the spec's length and protection, word objects at their
// token offsets.
func TestOpenContextOnModel(t *testing.T) {
	for _, chip := range []abi.Chip{abi.ChipWFR, abi.ChipJKR} {
		t.Run(chip.String(), func(t *testing.T) {
			cfg := model.DefaultConfig(chip)
			u := newModel(t, cfg)
			c, err := OpenContext(u, u.Path(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != abi.UserVersion || c.Chip != chip || c.Info.Credits != cfg.Credits ||
				c.Info.RcvHdrqEntSize != 128 || c.Base.BTHQP != abi.KDETHQPPrefix {
				t.Errorf("version %#x chip %v info %+v", c.Version, c.Chip, c.Info)
			}
			wantLen := map[abi.MmapType]int{
				abi.MmapPIOBufs: 12288, abi.MmapPIOBufsSOP: 12288, abi.MmapPIOCred: 4096,
				abi.MmapRcvHdrQ: 2048 * 128, abi.MmapRcvEgrBuf: 256 * 32768,
				abi.MmapURegs: 4096, abi.MmapEvents: 4096, abi.MmapStatus: 4096, abi.MmapSDMAComp: 4096,
			}
			if chip == abi.ChipJKR {
				wantLen[abi.MmapURegs] = 8192
				wantLen[abi.MmapRcvRHEQ] = 2048 * 8
			}
			for ty := abi.MmapPIOBufs; ty <= abi.MmapRcvRHEQ; ty++ {
				m := c.Region(ty)
				want, ok := wantLen[ty]
				if !ok {
					if m.Region != nil {
						t.Errorf("%v mapped but should not be", ty)
					}
					continue
				}
				if m.Region == nil || m.Region.Len() != want || m.Type != ty || m.Token.Type() != ty {
					t.Errorf("%v: mapping %+v, want %d bytes", ty, m, want)
				}
			}
			if off := c.Region(abi.MmapPIOCred).Off; off != int(c.Info.SendCtxt)*64+int(c.Info.SendCtxt&7)*8 {
				t.Errorf("credit word at %d", off)
			}
			if c.Region(abi.MmapPIOBufs).Region.Bytes() != nil {
				t.Error("PIO aperture readable as memory")
			}
			// The credit word is live: CREDIT_UPD shows through the mapping.
			if c.CreditReturn() != 0 {
				t.Errorf("fresh credit word %#x", uint64(c.CreditReturn()))
			}
			if err := c.CreditUpdate(); err != nil {
				t.Fatal(err)
			}
			if !c.CreditReturn().Decode().DueToForce || c.Events() != 0 {
				t.Errorf("after CREDIT_UPD: %+v, events %#x", c.CreditReturn().Decode(), c.Events())
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if u.OpenFiles() != 0 || u.Mapped() != 0 {
				t.Errorf("close leaked %d files, %d mappings", u.OpenFiles(), u.Mapped())
			}
		})
	}
}

func TestOpenContextCaps(t *testing.T) {
	cfg := model.DefaultConfig(abi.ChipWFR)
	cfg.Caps = abi.CapDMARtail
	cfg.SDMARingSize = 0
	u := newModel(t, cfg)
	c, err := OpenContext(u, u.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Region(abi.MmapRTail).Region == nil || c.Region(abi.MmapSDMAComp).Region != nil {
		t.Error("RTAIL must be mapped with DMA_RTAIL and SDMA_COMP not without SDMA")
	}
}

func TestOpenContextErrors(t *testing.T) {
	cfg := model.DefaultConfig(abi.ChipWFR)
	cfg.UserContexts = 1
	u := newModel(t, cfg)
	if _, err := OpenContext(u, "model:hfi1_7", Options{}); !errors.Is(err, unix.ENOENT) {
		t.Errorf("wrong unit: %v", err)
	}
	if _, err := OpenContext(u, u.Path(), Options{Port: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("port 1: %v", err)
	}
	if _, err := OpenContext(u, u.Path(), Options{KDETHRcvHdrSize: 1}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("KDETH header size 1: %v", err)
	}
	c, err := OpenContext(u, u.Path(), Options{KDETHRcvHdrSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenContext(u, u.Path(), Options{}); !errors.Is(err, unix.EBUSY) {
		t.Errorf("second context of one: %v", err)
	}
	c.Close()
	if u.OpenFiles() != 0 || u.Mapped() != 0 {
		t.Errorf("failed opens leaked %d files, %d mappings", u.OpenFiles(), u.Mapped())
	}
}

// faulty wraps a modeled unit and corrupts one step of the conversation,
// to check that set-up reports the driver's error and leaks nothing.
type faulty struct {
	*model.Unit
	ioctl func(cmd uint32, arg []byte)
	mmap  func(offset *int64, length, prot *int)
}

func (f *faulty) Ioctl(fd int, cmd uint32, arg []byte) error {
	if err := f.Unit.Ioctl(fd, cmd, arg); err != nil {
		return err
	}
	if f.ioctl != nil {
		f.ioctl(cmd, arg)
	}
	return nil
}

func (f *faulty) Mmap(fd int, offset int64, length, prot, flags int) (sys.Region, error) {
	if f.mmap != nil {
		f.mmap(&offset, &length, &prot)
	}
	return f.Unit.Mmap(fd, offset, length, prot, flags)
}

func TestOpenContextFaults(t *testing.T) {
	onType := func(ty abi.MmapType, f func(offset *int64, length, prot *int)) func(*int64, *int, *int) {
		return func(o *int64, l, p *int) {
			if abi.Token(*o).Type() == ty {
				f(o, l, p)
			}
		}
	}
	for _, c := range []struct {
		name  string
		ioctl func(cmd uint32, arg []byte)
		mmap  func(offset *int64, length, prot *int)
		want  error
	}{
		{name: "driver major 7", want: ErrVersion, ioctl: func(cmd uint32, arg []byte) {
			if cmd == abi.IoctlGetVers {
				le.PutUint32(arg, 7<<16)
			}
		}},
		{name: "unknown chip", want: ErrUnsupportedChip, ioctl: func(cmd uint32, arg []byte) {
			if cmd == abi.IoctlUserInfo {
				le.PutUint32(arg, uint32(abi.MakeHWVersion(abi.ChipCYR, 5, 0)))
			}
		}},
		{name: "token with bad magic", want: ErrBadToken, ioctl: func(cmd uint32, arg []byte) {
			if cmd == abi.IoctlUserInfo {
				arg[40+7] ^= 0xff // rcvhdr_bufbase's magic
			}
		}},
		{name: "token of another type", want: ErrBadToken, ioctl: func(cmd uint32, arg []byte) {
			if cmd == abi.IoctlUserInfo {
				copy(arg[48:56], arg[40:48]) // rcvegr_bufbase := rcvhdr_bufbase
			}
		}},
		{name: "magic corrupted on the way to mmap", want: unix.EINVAL,
			mmap: onType(abi.MmapStatus, func(o *int64, _, _ *int) { *o ^= 1 << 33 })},
		{name: "other ctxt in the token", want: unix.EINVAL,
			mmap: onType(abi.MmapRcvHdrQ, func(o *int64, _, _ *int) { *o ^= 1 << 16 })},
		{name: "hdrq one page short", want: unix.EINVAL,
			mmap: onType(abi.MmapRcvHdrQ, func(_ *int64, l, _ *int) { *l -= abi.PageSize })},
		{name: "eager writable", want: unix.EPERM,
			mmap: onType(abi.MmapRcvEgrBuf, func(_ *int64, _, p *int) { *p |= abi.ProtWrite })},
		{name: "credit page writable", want: unix.EPERM,
			mmap: onType(abi.MmapPIOCred, func(_ *int64, _, p *int) { *p |= abi.ProtWrite })},
		{name: "SDMA ring long", want: unix.EINVAL,
			mmap: onType(abi.MmapSDMAComp, func(_ *int64, l, _ *int) { *l += abi.PageSize })},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newModel(t, model.DefaultConfig(abi.ChipWFR))
			f := &faulty{Unit: u, ioctl: c.ioctl, mmap: c.mmap}
			_, err := OpenContext(f, u.Path(), Options{})
			if !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
			if u.OpenFiles() != 0 || u.Mapped() != 0 {
				t.Errorf("leaked %d files, %d mappings", u.OpenFiles(), u.Mapped())
			}
		})
	}
}
