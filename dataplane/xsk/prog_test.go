package xsk

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	bpflink "github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/softfabric/softfabric/internal/netnstest"
)

// testPort is the UDP port the test XDP program redirects; everything else
// passes to the kernel stack.
const testPort = 47910

// redirectProgram returns an XDP program that sends IPv4/UDP frames to
// testPort into xskmap[rx_queue_index] and passes the rest (and frames for
// a queue without a socket: the XDP_PASS fallback of bpf_redirect_map).
// The header offsets assume no VLAN tag and no IP options, which is all the
// tests send. frags loads it with BPF_F_XDP_HAS_FRAGS, which multi-buffer
// sockets need: without it, the kernel drops frames bigger than a page.
func redirectProgram(t testing.TB, xskmap *ebpf.Map, frags bool) *ebpf.Program {
	t.Helper()
	const pass = 2 // XDP_PASS
	spec := &ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 38),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R5, asm.R2, 12, asm.Half), // EtherType, network order read little-endian
			asm.JNE.Imm(asm.R5, int32(bits.ReverseBytes16(0x0800)), "pass"),
			asm.LoadMem(asm.R5, asm.R2, 23, asm.Byte), // IP protocol
			asm.JNE.Imm(asm.R5, unix.IPPROTO_UDP, "pass"),
			asm.LoadMem(asm.R5, asm.R2, 36, asm.Half), // UDP destination port
			asm.JNE.Imm(asm.R5, int32(bits.ReverseBytes16(testPort)), "pass"),
			asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // rx_queue_index
			asm.LoadMapPtr(asm.R1, xskmap.FD()),
			asm.Mov.Imm(asm.R3, pass),
			asm.FnRedirectMap.Call(),
			asm.Return(),
			asm.Mov.Imm(asm.R0, pass).WithSymbol("pass"),
			asm.Return(),
		},
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatalf("loading xdp program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// end is one host of a test pair with its XDP program and sockets.
type end struct {
	h     *netnstest.Host
	mode  bpflink.XDPAttachFlags
	xsks  *ebpf.Map
	socks []*Socket
}

type envOptions struct {
	queues int
	mtu    int
	frags  bool
	mode   bpflink.XDPAttachFlags // default generic
	cfg    Config                 // template for every socket
	noSock bool                   // attach programs, open no sockets
}

// newEnv builds a veth pair with an XDP program on each side and, unless
// noSock, one socket per queue on each side, registered in that side's
// XSKMAP.
func newEnv(t testing.TB, o envOptions) (a, b *end) {
	t.Helper()
	if o.queues == 0 {
		o.queues = 2
	}
	if o.mode == 0 {
		o.mode = bpflink.XDPGenericMode
	}
	p := netnstest.NewPair(t, netnstest.Options{Queues: o.queues, MTU: o.mtu})
	a, b = &end{h: p.A, mode: o.mode}, &end{h: p.B, mode: o.mode}
	for _, e := range []*end{a, b} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(o.queues)})
		if err != nil {
			t.Fatalf("xskmap: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		e.xsks = m
		prog := redirectProgram(t, m, o.frags)
		err = e.h.Do(func() error {
			l, err := bpflink.AttachXDP(bpflink.XDPOptions{Program: prog, Interface: e.h.Index, Flags: o.mode})
			if err != nil {
				return fmt.Errorf("attaching xdp (flags %v): %w", o.mode, err)
			}
			t.Cleanup(func() { l.Close() })
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if o.noSock {
			continue
		}
		for q := range o.queues {
			cfg := o.cfg
			cfg.Ifindex, cfg.Queue = e.h.Index, q
			e.open(t, cfg)
		}
	}
	return a, b
}

// open opens a socket inside the host's namespace and registers it in the
// XSKMAP under its queue.
func (e *end) open(t testing.TB, cfg Config) *Socket {
	t.Helper()
	var s *Socket
	err := e.h.Do(func() (err error) {
		s, err = Open(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := e.xsks.Put(uint32(cfg.Queue), uint32(s.FD())); err != nil {
		t.Fatalf("xskmap put: %v", err)
	}
	e.socks = append(e.socks, s)
	return s
}

// udpFrame builds an Ethernet/IPv4/UDP frame of exactly size bytes (≥ 46)
// to testPort, whose payload starts with seq and continues with bytes
// derived from seq and size, so a receiver can check it byte for byte.
func udpFrame(buf []byte, src, dst net.HardwareAddr, srcPort uint16, seq uint32, size int) []byte {
	f := buf[:size]
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	binary.BigEndian.PutUint32(ip[4:], 0x40000000) // id 0, DF
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], []byte{198, 18, 0, 1})
	copy(ip[16:20], []byte{198, 18, 0, 2})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], testPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	binary.BigEndian.PutUint16(udp[6:], 0)
	binary.BigEndian.PutUint32(f[42:], seq)
	for i := 46; i < size; i++ {
		f[i] = byte(uint32(i)*7 + seq)
	}
	return f
}

// checkFrame returns the frame's seq, or an error if it is not byte for
// byte what udpFrame built for that seq and length.
func checkFrame(f []byte, src, dst net.HardwareAddr, srcPort uint16) (uint32, error) {
	if len(f) < 46 {
		return 0, fmt.Errorf("short frame: %d bytes", len(f))
	}
	seq := binary.BigEndian.Uint32(f[42:])
	want := udpFrame(make([]byte, len(f)), src, dst, srcPort, seq, len(f))
	for i := range f {
		if f[i] != want[i] {
			return seq, fmt.Errorf("seq %d (%d bytes): byte %d is %#x, want %#x", seq, len(f), i, f[i], want[i])
		}
	}
	return seq, nil
}

// drain receives from every socket of e until want frames arrived or
// nothing came for idle; it returns the frames per socket index.
func drain(t testing.TB, e *end, src net.HardwareAddr, srcPort uint16, want int, idle time.Duration, seen map[uint32]int) []int {
	t.Helper()
	got := make([]int, len(e.socks))
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9216)
	}
	sizes := make([]int, len(bufs))
	total := 0
	last := time.Now()
	for total < want && time.Since(last) < idle {
		progress := false
		for si, s := range e.socks {
			n, err := s.Recv(bufs, sizes)
			if err != nil {
				t.Fatalf("recv: %v", err)
			}
			for i := range n {
				seq, err := checkFrame(bufs[i][:sizes[i]], src, e.h.MAC, srcPort)
				if err != nil {
					t.Fatal(err)
				}
				seen[seq]++
			}
			got[si] += n
			total += n
			progress = progress || n > 0
		}
		if progress {
			last = time.Now()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// rxQueue is the rx queue on which a veth delivers what its peer sent on tx
// queue q, as measured on kernel 6.18 (TestVethQueueMapping). With a native
// XDP program the peer's NAPI path records rx queue q. With generic XDP the
// frame takes the backlog path and keeps the sender's queue_mapping, which
// the receive side reads as "rx queue recorded plus one": tx queue q arrives
// on rx queue q-1, tx queue 0 on rx queue 0, and the last rx queue gets
// nothing.
func (e *end) rxQueue(q int) int {
	if e.mode == bpflink.XDPDriverMode {
		return q
	}
	return max(q-1, 0)
}
