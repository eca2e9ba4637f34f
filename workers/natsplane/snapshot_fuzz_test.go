package natsplane

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// snapshotHeader encodes a snapshot header as Source.snapshot writes it: magic, version, stream sequence
// and each rank's (worker, rank, last seq, has, epoch).
func snapshotHeader(version uint32, streamSeq uint64, epochs ...string) []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.Write(snapshotMagic[:])
	w(version)
	w(streamSeq)
	w(uint32(len(epochs)))
	for i, ep := range epochs {
		w(uint64(i + 1))
		w(uint32(0))
		w(uint64(100 + i))
		w(uint8(1))
		w(uint16(len(ep)))
		b.WriteString(ep)
	}
	return b.Bytes()
}

// FuzzReadSnapshotHeader: the object store's snapshot is written by any frontend of the cluster (or any
// client allowed to write the store), so its header is outside input: reading it never panics, refuses
// every malformed header with ErrBadSnapshot, and holds no more rank states than its bytes describe.
func FuzzReadSnapshotHeader(f *testing.F) {
	f.Add(snapshotHeader(snapshotVersion, 7))
	f.Add(snapshotHeader(snapshotVersion, 7, "epoch-a", ""))
	f.Add(snapshotHeader(snapshotVersion+1, 7, "x"))
	f.Add(snapshotHeader(snapshotVersion, 1<<63, string(make([]byte, 300))))
	f.Add(append(snapshotHeader(snapshotVersion, 7), 0xff, 0xff, 0xff, 0xff))
	f.Add([]byte("KVRS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := bytes.NewReader(b)
		_, states, err := readSnapshotHeader(rd)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		// A rank state takes 8+4+8+1+2 bytes plus its epoch; the header 4+4+8+4.
		used := len(b) - rd.Len()
		if min := 20 + 23*len(states); used < min {
			t.Fatalf("%d rank states read from %d bytes", len(states), used)
		}
	})
}
