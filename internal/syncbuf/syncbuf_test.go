package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Writers on several goroutines and a reader at once lose nothing (run
// with -race).
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if s := b.String(); s != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(s))
	}
}
