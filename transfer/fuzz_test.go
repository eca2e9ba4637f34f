package transfer

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzReadItem: item bytes come from another process (a segment anyone of the same user may write, or
// the network); no input may panic or allocate beyond the descriptor's length.
func FuzzReadItem(f *testing.F) {
	tn := testTensor(3, 2)
	good := make([]byte, tn.EncodedLen())
	sum := tn.EncodeTo(good)
	d := newDescriptor(KindShm, &tn, sum)
	f.Add(good)
	f.Add(good[:headerSize])
	f.Add([]byte("KVMM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readItem(bytes.NewReader(b), &d)
		if err == nil && got.Checksum() != sum {
			t.Fatal("accepted an item whose checksum differs from the descriptor's")
		}
	})
}

// FuzzDescriptor: descriptors arrive in request bodies; Validate must refuse any segment name that is
// not a kvroute segment (no path can escape the shm directory).
func FuzzDescriptor(f *testing.F) {
	f.Add(`{"kind":"shm","name":"kvroute_mm_12_0123456789ab","length":6208,"dtype":"float32","shape":[1,1536],"grid_thw":[1,1,1],"checksum":"0123456789abcdef"}`)
	f.Add(`{"kind":"shm","name":"../../etc/passwd"}`)
	f.Add(`{"kind":"net","addr":"127.0.0.1:1","token":"00"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var d Descriptor
		if json.Unmarshal([]byte(s), &d) != nil {
			return
		}
		if d.Validate() == nil && d.Kind == KindShm && !shmNameRE.MatchString(d.Name) {
			t.Fatalf("accepted segment name %q", d.Name)
		}
	})
}
