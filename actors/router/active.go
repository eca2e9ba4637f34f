package router

import (
	"hash/maphash"
	"sync"
)

// activeShards is the number of independently locked parts of the active-request map: every request
// touches it three times (route, first token, end), from as many goroutines as requests in flight.
const activeShards = 32

// activeMap maps the id of every routed, not yet freed request to the target charged for it. It is split
// by a hash of the id so concurrent requests rarely share a lock.
type activeMap struct {
	seed   maphash.Seed
	shards [activeShards]struct {
		mu sync.Mutex
		m  map[string]*target
		_  [40]byte // one shard per cache line
	}
}

func newActiveMap() *activeMap {
	a := &activeMap{seed: maphash.MakeSeed()}
	for i := range a.shards {
		a.shards[i].m = make(map[string]*target)
	}
	return a
}

func (a *activeMap) shard(id string) int { return int(maphash.String(a.seed, id) % activeShards) }

// get returns id's target, or nil.
func (a *activeMap) get(id string) *target {
	sh := &a.shards[a.shard(id)]
	sh.mu.Lock()
	t := sh.m[id]
	sh.mu.Unlock()
	return t
}

// has reports whether id is active.
func (a *activeMap) has(id string) bool { return a.get(id) != nil }

// add records id → t unless id is already active; it reports whether it did.
func (a *activeMap) add(id string, t *target) bool {
	sh := &a.shards[a.shard(id)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, dup := sh.m[id]; dup {
		return false
	}
	sh.m[id] = t
	return true
}

// remove drops id and returns its target, or nil.
func (a *activeMap) remove(id string) *target {
	sh := &a.shards[a.shard(id)]
	sh.mu.Lock()
	t := sh.m[id]
	delete(sh.m, id)
	sh.mu.Unlock()
	return t
}

// removeWorker drops every request charged to worker id.
func (a *activeMap) removeWorker(id uint64) {
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for rid, t := range sh.m {
			if t.key.WorkerID == id {
				delete(sh.m, rid)
			}
		}
		sh.mu.Unlock()
	}
}

// len counts the active requests.
func (a *activeMap) len() int {
	n := 0
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
