package wire

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// The payload of an outgoing frame is copied from a memory region into the
// frame, then read again for the ICRC; an incoming one is read for the
// ICRC, then copied into a region. These benchmarks measure whether doing
// both in one pass, chunk by chunk while the chunk is in L1, beats two
// passes over the frame, with the source cold (rotating through 256 MiB,
// more than the caches) as a memory region's bytes usually are.
//
//	go test -run '^$' -bench 'Pass' -benchmem ./dataplane/wire

const passPool = 256 << 20

var passSrc []byte

func passSource() []byte {
	if passSrc == nil {
		passSrc = make([]byte, passPool)
		for i := range passSrc {
			passSrc[i] = byte(i * 7) // touch every page: untouched ones all read the zero page
		}
	}
	return passSrc
}

func benchPass(b *testing.B, size int, pass func(dst, src []byte) uint32) {
	src := passSource()
	dst := make([]byte, size)
	b.SetBytes(int64(size))
	off := 0
	var sink uint32
	for b.Loop() {
		if off+size > passPool {
			off = 0
		}
		sink ^= pass(dst, src[off:off+size])
		off += size + 4096 // skip a page: defeat the prefetcher's stride a little
	}
	_ = sink
}

func copyThenCRC(dst, src []byte) uint32 {
	copy(dst, src)
	return crc32.Update(0, crc32.IEEETable, dst)
}

func fusedCRC(chunk int) func(dst, src []byte) uint32 {
	return func(dst, src []byte) uint32 {
		var c uint32
		for o := 0; o < len(src); o += chunk {
			e := min(o+chunk, len(src))
			copy(dst[o:e], src[o:e])
			c = crc32.Update(c, crc32.IEEETable, dst[o:e])
		}
		return c
	}
}

func copyOnly(dst, src []byte) uint32 { copy(dst, src); return 0 }

func crcOnly(_, src []byte) uint32 { return crc32.Update(0, crc32.IEEETable, src) }

func BenchmarkPass(b *testing.B) {
	for _, size := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("copy/%d", size), func(b *testing.B) { benchPass(b, size, copyOnly) })
		b.Run(fmt.Sprintf("crc/%d", size), func(b *testing.B) { benchPass(b, size, crcOnly) })
		b.Run(fmt.Sprintf("copy-then-crc/%d", size), func(b *testing.B) { benchPass(b, size, copyThenCRC) })
		for _, chunk := range []int{256, 1024} {
			b.Run(fmt.Sprintf("fused-%d/%d", chunk, size), func(b *testing.B) { benchPass(b, size, fusedCRC(chunk)) })
		}
	}
}
