package ctrl

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestSocketsRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "eth0")
	if _, err := LoadSockets(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no record: %v", err)
	}
	in := &Sockets{PID: 42, Queues: []SocketInfo{{Queue: 0, Mode: "copy", RxRing: 2048, InPlace: true}, {Queue: 1, Mode: "zero-copy"}}}
	if err := SaveSockets(dir, in); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, socketsFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v, %v", fi, err)
	}
	out, err := LoadSockets(dir)
	if err != nil || out.PID != 42 || len(out.Queues) != 2 || out.Queues[0] != in.Queues[0] || out.Queues[1].Mode != "zero-copy" {
		t.Fatalf("read back %+v, %v", out, err)
	}
	if err := RemoveSockets(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveSockets(dir); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, socketsFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSockets(dir); err == nil {
		t.Fatal("a torn record was read")
	}
}
