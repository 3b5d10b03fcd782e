package mad

import (
	"encoding/hex"
	"strings"
	"testing"
)

// kat builds DataSize bytes of class data from (offset, hex bytes) pairs;
// everything not named is zero. Spaces in the hex are ignored.
func kat(t testing.TB, pairs ...any) []byte {
	t.Helper()
	b := make([]byte, DataSize)
	for i := 0; i < len(pairs); i += 2 {
		off := pairs[i].(int)
		v, err := hex.DecodeString(strings.ReplaceAll(pairs[i+1].(string), " ", ""))
		if err != nil {
			t.Fatalf("bad hex at offset %d: %v", off, err)
		}
		copy(b[off:], v)
	}
	return b
}

// seq returns n bytes counting up from start.
func seq(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}
