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

// Restore replays Dump's entries (single-block stores, parents before children, workers in any order)
// into the index: consecutive entries of one worker become one Apply of at most 4096 stores. It returns
// once they are sent; call Flush for a barrier. Snapshots only.
func (x *Indexer) Restore(entries []prefix.DumpEntry) {
	var cur *Apply
	flush := func() {
		if cur != nil && len(cur.Ops) > 0 {
			_ = x.Apply(cur)
		}
		cur = nil
	}
	for _, e := range entries {
		if cur == nil || cur.WorkerID != e.Worker.WorkerID || len(cur.Ops) >= 4096 {
			flush()
			cur = &Apply{WorkerID: e.Worker.WorkerID}
		}
		cur.Ops = append(cur.Ops, Op{Kind: OpStore, DPRank: e.Worker.DPRank, Parent: e.Parent, HasParent: e.HasParent,
			Blocks: []prefix.Block{e.Block}})
	}
	flush()
}
