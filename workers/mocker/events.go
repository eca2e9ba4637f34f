package mocker

import (
	"time"

	"github.com/kvroute/kvroute/workers/kvevents"
)

// specKind is the kv_cache_spec_kind current vLLM sends for a plain decoder (spec/vllm-kv-events.md §4.1).
const specKind = "full_attention"

// batchFromEvents fills b with the engine events of one step, shaped as current vLLM sends them: medium
// "GPU", group_idx 0, kv_cache_spec_kind "full_attention" on stores, one extra_keys entry per stored block
// (None for text-only blocks), dp_rank always present. Hash and token slices are copied or alias
// memory the engine never mutates, so b stays valid after the next Step.
func batchFromEvents(b *kvevents.Batch, evs []KVEvent, ts time.Time, dpRank int) {
	b.Reset()
	b.TS = float64(ts.UnixNano()) / 1e9
	b.DPRank, b.HasDPRank = uint32(dpRank), true
	if cap(b.Events) < len(evs) {
		b.Events = make([]kvevents.Event, 0, len(evs))
	}
	for i := range evs {
		ev := &evs[i]
		out := kvevents.Event{Medium: "GPU", GroupIdx: 0, HasGroupIdx: true}
		switch ev.Kind {
		case EventStored:
			out.Kind = kvevents.Stored
			out.BlockHashes = hashesToU64(ev.Hashes)
			out.ParentHash, out.HasParent = uint64(ev.Parent), ev.HasParent
			out.TokenIDs = ev.Tokens
			out.BlockSize = ev.BlockSize
			out.LoraName = ev.LoraName
			out.ExtraKeys = make([][]kvevents.ExtraKey, len(ev.Extra))
			for j, k := range ev.Extra {
				out.ExtraKeys[j] = extraToWire(k)
			}
			out.SpecKind = specKind
		case EventRemoved:
			out.Kind = kvevents.Removed
			out.BlockHashes = hashesToU64(ev.Hashes)
		case EventCleared:
			out = kvevents.Event{Kind: kvevents.Cleared}
		}
		b.Events = append(b.Events, out)
	}
}

func hashesToU64(hs []BlockHash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// extraToWire turns one block's extra keys into vLLM's tuple: LoRA name, (mm id, offset) pairs, cache salt.
func extraToWire(k *ExtraKeys) []kvevents.ExtraKey {
	if k == nil {
		return nil
	}
	out := make([]kvevents.ExtraKey, 0, k.Len())
	if k.LoraName != "" {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraString, Str: k.LoraName})
	}
	for _, m := range k.MM {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraMM, Str: m.ID, Int: int64(m.Offset)})
	}
	if k.CacheSalt != "" {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraString, Str: k.CacheSalt})
	}
	return out
}
