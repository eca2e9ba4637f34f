package kvevents

import (
	"fmt"
	"testing"
)

// benchPayload builds a realistic batch: nEvents BlockStored events of blocks blocks of size bs each
// (Qwen-sized token ids, u64 hashes, extra_keys [None]*blocks), in the given layout.
func benchPayload(nEvents, blocks, bs int, layout Layout) []byte {
	b := &Batch{TS: specTS, HasDPRank: true}
	tok := uint32(100_000)
	for i := 0; i < nEvents; i++ {
		e := Event{Kind: Stored, BlockSize: bs, Medium: "GPU", HasGroupIdx: true, SpecKind: "full_attention",
			HasParent: i > 0, ParentHash: 0xdab89baa7b5857c0 + uint64(i)}
		for k := 0; k < blocks; k++ {
			e.BlockHashes = append(e.BlockHashes, 0x9000000000000000+uint64(i*blocks+k)*0x9e3779b97f4a7c15)
			e.ExtraKeys = append(e.ExtraKeys, nil)
			for t := 0; t < bs; t++ {
				tok = tok*1103515245 + 12345
				e.TokenIDs = append(e.TokenIDs, tok%151_000)
			}
		}
		b.Events = append(b.Events, e)
	}
	return AppendBatch(nil, b, layout)
}

type decodeFunc func([]byte, *Batch) error

// BenchmarkDecode: one op decodes one batch of E BlockStored events with B blocks of 16 tokens each;
// events/s counts events, blocks/s blocks. impl=hand is Decode, impl=vmihailenco the msgpack/v5 variant.
func BenchmarkDecode(b *testing.B) {
	vm := newVMDecoder()
	impls := []struct {
		name string
		fn   decodeFunc
	}{{"hand", Decode}, {"vmihailenco", vm.Decode}}
	for _, layout := range []struct {
		name string
		l    Layout
	}{{"map", LayoutMap}, {"array", LayoutArray}} {
		for _, shape := range []struct{ events, blocks int }{{1, 1}, {8, 4}, {4, 64}} {
			p := benchPayload(shape.events, shape.blocks, 16, layout.l)
			for _, impl := range impls {
				name := fmt.Sprintf("layout=%s/E=%d/B=%d/impl=%s", layout.name, shape.events, shape.blocks, impl.name)
				b.Run(name, func(b *testing.B) {
					var bt Batch
					b.ReportAllocs()
					b.SetBytes(int64(len(p)))
					for i := 0; i < b.N; i++ {
						if err := impl.fn(p, &bt); err != nil {
							b.Fatal(err)
						}
					}
					sec := b.Elapsed().Seconds()
					b.ReportMetric(float64(b.N*shape.events)/sec, "events/s")
					b.ReportMetric(float64(b.N*shape.events*shape.blocks)/sec, "blocks/s")
				})
			}
		}
	}
}

// BenchmarkEncode: one op appends one batch (E events × B blocks of 16 tokens) to a reused buffer.
func BenchmarkEncode(b *testing.B) {
	for _, layout := range []struct {
		name string
		l    Layout
	}{{"map", LayoutMap}, {"array", LayoutArray}} {
		for _, shape := range []struct{ events, blocks int }{{1, 1}, {8, 4}, {4, 64}} {
			var src Batch
			if err := Decode(benchPayload(shape.events, shape.blocks, 16, layout.l), &src); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("layout=%s/E=%d/B=%d", layout.name, shape.events, shape.blocks), func(b *testing.B) {
				var buf []byte
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					buf = AppendBatch(buf[:0], &src, layout.l)
				}
				b.SetBytes(int64(len(buf)))
				b.ReportMetric(float64(b.N*shape.events)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// TestVMDecoderAgrees keeps the benchmarked alternative equivalent on the realistic payloads.
func TestVMDecoderAgrees(t *testing.T) {
	vm := newVMDecoder()
	for _, l := range []Layout{LayoutMap, LayoutArray} {
		p := benchPayload(4, 8, 16, l)
		var a, b Batch
		if err := Decode(p, &a); err != nil {
			t.Fatal(err)
		}
		if err := vm.Decode(p, &b); err != nil {
			t.Fatal(err)
		}
		sameBatch(t, &b, &a)
	}
	for _, name := range []string{"stored_map", "stored_array", "stored_mm_map"} {
		var a, b Batch
		p := loadHex(t, name)
		if err := Decode(p, &a); err != nil {
			t.Fatal(err)
		}
		if err := vm.Decode(p, &b); err != nil {
			t.Fatal(name, err)
		}
		sameBatch(t, &b, &a)
	}
}
