package prefix

import (
	"fmt"
	"slices"
)

// roundTrip dumps ix, replays the dump into a fresh index and checks that both answer alike: every worker
// with blocks, their sizes (less what the dump reports as skipped) and the matches of every root-to-leaf
// path and each of its prefixes.
func roundTrip(ix *Index) error {
	fresh := New()
	var replayErr error
	skipped := ix.Dump(func(e DumpEntry) {
		if err := fresh.Store(e.Worker, e.Parent, e.HasParent, []Block{e.Block}); err != nil && replayErr == nil {
			replayErr = err
		}
	})
	if replayErr != nil {
		return fmt.Errorf("replay: %w", replayErr)
	}
	if fresh.Size()+skipped != ix.Size() {
		return fmt.Errorf("replayed size %d + skipped %d, want %d", fresh.Size(), skipped, ix.Size())
	}
	for _, w := range ix.Workers() {
		if skipped == 0 && fresh.WorkerBlocks(w) != ix.WorkerBlocks(w) {
			return fmt.Errorf("worker %v: replayed %d blocks, want %d", w, fresh.WorkerBlocks(w), ix.WorkerBlocks(w))
		}
	}
	if err := checkInvariants(fresh); err != nil {
		return fmt.Errorf("replayed invariant: %w", err)
	}
	var paths [][]uint64
	var walk func(n uint32, prefix []uint64)
	walk = func(n uint32, prefix []uint64) {
		nd := &ix.nodes[n]
		for j := range nd.hashes {
			prefix = append(prefix, nd.hashes[j])
			paths = append(paths, slices.Clone(prefix))
		}
		nd.eachKid(func(c uint32) { walk(c, prefix) })
	}
	walk(rootNode, nil)
	for _, q := range paths {
		a, b := ix.FindMatches(q, nil), fresh.FindMatches(q, nil)
		sortScores(a)
		sortScores(b)
		if !slices.Equal(a, b) {
			return fmt.Errorf("query %v: replayed %v, want %v", q, b, a)
		}
	}
	return nil
}
