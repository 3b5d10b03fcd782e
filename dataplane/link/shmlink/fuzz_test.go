package shmlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FuzzMap maps memfds holding arbitrary headers and sizes: Map must refuse
// them with ErrBadRegion or give a working region, never panic.
func FuzzMap(f *testing.F) {
	good, err := Create("seed", Config{Slots: 8, SlotSize: 256})
	if err != nil {
		f.Fatal(err)
	}
	hdr := bytes.Clone(good.mem[:headerSize])
	size := good.l.size
	good.Close()
	f.Add(hdr, uint32(size))
	f.Add(hdr, uint32(size-1))
	f.Add(hdr[:20], uint32(size))
	f.Add([]byte(Magic), uint32(64))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, hdr []byte, size uint32) {
		size %= 1 << 22
		r, err := Map(testFDs(t, hdr, uint64(size)))
		if err != nil {
			if !errors.Is(err, ErrBadRegion) {
				t.Fatalf("error %v does not wrap ErrBadRegion", err)
			}
			return
		}
		defer r.Close()
		cfg := r.Config()
		if uint64(cfg.Slots)*uint64(cfg.SlotSize)*2 > uint64(size) {
			t.Fatalf("config %+v does not fit %d bytes", cfg, size)
		}
		a, d := r.AppEnd(), r.DaemonEnd()
		if n, err := a.Send([][]byte{make([]byte, cfg.SlotSize)}); n != 1 || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		in, sizes := bufs(1, cfg.SlotSize)
		if n, err := d.Recv(in, sizes); n != 1 || err != nil || sizes[0] != cfg.SlotSize {
			t.Fatalf("Recv: %d, %v", n, err)
		}
	})
}

// FuzzDaemonRecv lets the application scribble over the region, the
// daemon's own words included, between the daemon's calls: the daemon's
// end must never panic, never hand out a frame longer than a slot or
// outside the region, and once it reports corruption it stays failed.
func FuzzDaemonRecv(f *testing.F) {
	const slots, size = 8, 256
	// Each op is 6 bytes: what to scribble (kind<<4 | index<<1 | ring;
	// kinds: 0 a control word (index 0 producer, 1 consumer, 2 sleeping
	// flag), 1 a slot's length, 2 a frame byte, 3 a slot's sequence word),
	// a value, then what the daemon does (see daemon below).
	f.Add([]byte{0x01, 3, 0, 0, 0, 0})                        // from-app producer 3 (unused), Recv
	f.Add([]byte{0x33, 3, 0, 0, 0, 0})                        // from-app slot 1 sequence 3: not yet
	f.Add([]byte{0x35, 11, 0, 0, 0, 1})                       // from-app slot 2 sequence 11: a round ahead
	f.Add([]byte{0x11, 1, 1, 0, 0, 1})                        // length 257 in from-app slot 0, RecvZC
	f.Add([]byte{0x02, 200, 0, 0, 0, 3, 0x30, 0, 0, 0, 0, 4}) // to-app consumer 200, Send, TxBuf
	f.Add([]byte{0x04, 1, 0, 0, 0, 3, 0x05, 1, 0, 0, 0, 5})   // sleeping flags, Send, PrepareWait
	f.Add([]byte{0x00, 7, 0, 0, 0, 3, 0x03, 7, 0, 0, 0, 0})   // the daemon's own words
	r, err := Create("fuzz", Config{Slots: slots, SlotSize: size})
	if err != nil {
		f.Fatal(err)
	}
	defer r.Close()
	f.Fuzz(func(t *testing.T, ops []byte) {
		// A fresh region, reusing the mapping: zeroed rings, new Ends.
		clear(r.mem[headerSize:])
		var drain [4096]byte
		for _, fd := range []int{r.fds[1], r.own[0], r.wake[0], r.wake[1]} {
			unix.Read(fd, drain[:])
		}
		r.app = newEnd(r, "app", r.mem, r.l, ringFromApp, ringToApp, r.fds[1], r.fds[2], r.wake[0])
		r.daemon = newEnd(r, "daemon", r.mem, r.l, ringToApp, ringFromApp, r.own[0], r.own[1], r.wake[1])
		a, d := r.AppEnd(), r.DaemonEnd()
		if n, err := a.Send([][]byte{frame(0, size), frame(1, size)}); n != 2 || err != nil {
			t.Fatal(n, err)
		}
		lo := uintptr(unsafe.Pointer(&r.mem[0]))
		hi := lo + uintptr(len(r.mem))
		in, sizes := bufs(slots, size)
		views := make([][]byte, slots)
		frames := [][]byte{make([]byte, 60), make([]byte, size)}
		failed := false
		checkFailed := func(err error) {
			if err != nil && errors.Is(err, ErrBadRegion) {
				failed = true
			} else if failed {
				t.Fatalf("after corruption: %v", err)
			} else if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
		}
		daemon := func(op byte) {
			switch op % 6 {
			case 0:
				n, err := d.Recv(in, sizes)
				for k := range n {
					if sizes[k] > size {
						t.Fatalf("frame of %d bytes", sizes[k])
					}
				}
				checkFailed(err)
			case 1:
				n := d.RecvZC(views)
				for i := range n + 1 {
					if x, ok := d.Expectation(i); ok && i < n && len(views[i]) != ExpectationSize {
						t.Fatalf("expectation %+v in a view of %d bytes", x, len(views[i]))
					}
				}
				for _, v := range views[:n] {
					p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
					if len(v) > size || cap(v) > size || p < lo || p+uintptr(cap(v)) > hi {
						t.Fatalf("view of %d bytes at %#x, region %#x-%#x", len(v), p, lo, hi)
					}
				}
				if failed && n != 0 {
					t.Fatal("RecvZC after corruption")
				}
			case 2:
				d.ReleaseRx()
			case 3:
				_, err := d.Send(frames)
				checkFailed(err)
			case 4:
				if b := d.TxBuf(); b != nil {
					if len(b) != size {
						t.Fatalf("TxBuf of %d bytes", len(b))
					}
					d.TxSubmit(int(op))
				}
				checkFailed(d.Flush())
				d.TxRoom()
			case 5:
				d.PrepareWait(time.Millisecond)
			}
		}
		for len(ops) >= 6 {
			what, v, act := ops[0], binary.LittleEndian.Uint32(ops[1:5]), ops[5]
			ops = ops[6:]
			ring, index := int(what&1), what>>1&7
			switch what >> 4 % 4 {
			case 0:
				r.word(ring, uint64(index%3)*cacheLine).Store(v)
			case 1:
				r.lenAt(ring, uint32(index)%slots).Store(v)
			case 3:
				r.seqAt(ring, uint32(index)%slots).Store(v)
			case 2:
				off := r.l.data[ring] + uint64(v)%(uint64(slots)*r.l.stride)
				r.mem[off] = byte(v >> 24)
			}
			daemon(act)
		}
		for op := range byte(6) {
			daemon(op)
		}
		bad := errors.Is(d.err(), ErrBadRegion)
		if st := d.Stats(); (st.BadDescriptors != 0) != bad || st.BadDescriptors > 1 || failed && !bad {
			t.Fatalf("BadDescriptors %d, failed %v: %v", st.BadDescriptors, failed, d.err())
		}
	})
}
