package kvevents

import (
	"math"
	"reflect"
	"testing"
)

// FuzzDecode feeds arbitrary payloads to Decode: it must never panic, and whatever it accepts must survive
// an encode/decode round trip in both layouts unchanged. Seeds: every golden fixture
// (testdata/fuzz/FuzzDecode holds the committed corpus).
func FuzzDecode(f *testing.F) {
	for _, g := range goldens() {
		f.Add(loadHex(f, g.name))
	}
	f.Add(benchPayload(2, 3, 4, LayoutMap))
	f.Fuzz(func(t *testing.T, p []byte) {
		var b Batch
		if err := Decode(p, &b); err != nil {
			return
		}
		for _, layout := range []Layout{LayoutMap, LayoutArray} {
			enc := AppendBatch(nil, &b, layout)
			var b2 Batch
			if err := Decode(enc, &b2); err != nil {
				t.Fatalf("re-decode (layout %d): %v\npayload %x\nencoded %x", layout, err, p, enc)
			}
			if math.Float64bits(b.TS) != math.Float64bits(b2.TS) || b.DPRank != b2.DPRank || b.HasDPRank != b2.HasDPRank ||
				len(b.Events) != len(b2.Events) {
				t.Fatalf("batch header changed in round trip (layout %d): %x", layout, p)
			}
			for i := range b.Events {
				if g, w := exported(b2.Events[i]), exported(b.Events[i]); !reflect.DeepEqual(g, w) {
					t.Fatalf("event %d changed (layout %d)\n got %+v\nwant %+v\npayload %x", i, layout, g, w, p)
				}
			}
		}
	})
}
