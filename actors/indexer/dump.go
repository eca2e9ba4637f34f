package indexer

import "github.com/kvroute/kvroute/scoring/prefix"

// Dump emits every shard's index as single-block stores (prefix.Index.Dump), shard by shard, each under
// that shard's mutex (its writer waits). Workers are disjoint across shards, so the concatenation replays into a fresh
// index as the same index. Call Flush (or Fleet.Sync) first for a dump that includes every write sent so
// far. It returns the blocks that could not be expressed (see prefix.Index.Dump). Snapshots only.
func (x *Indexer) Dump(fn func(prefix.DumpEntry)) (skipped int) {
	for _, s := range x.shards {
		s.mu.Lock()
		skipped += s.idx.Dump(fn)
		s.mu.Unlock()
	}
	return skipped
}
