package indexer

import (
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// shardMessage seals the messages a shard actor understands.
type shardMessage interface{ shardMessage() }

// OpKind says what one Op does to the index.
type OpKind uint8

// The three vLLM event kinds, already re-keyed.
const (
	OpStore OpKind = iota + 1
	OpRemove
	OpClear
)

// Op is one re-keyed KV event of one worker rank.
type Op struct {
	Kind   OpKind
	DPRank uint32
	// Parent and HasParent locate the first stored block under the worker's engine-hash handle.
	Parent    uint64
	HasParent bool
	// Blocks are the stored blocks in chain order (OpStore).
	Blocks []prefix.Block
	// Hashes are the engine hashes of removed blocks (OpRemove).
	Hashes []uint64
	// Medium is the storage tier of the stored or removed blocks (the event's medium). The index keeps
	// per-tier references (prefix.StoreTier): a block offloaded to host memory is never credited as device
	// cache, only as the host overlap of prefix.Score, and its eviction from host memory does not remove
	// the device copy. Host-pinned → host tier; disk and external → disk tier; an unknown medium is
	// counted (WorkerStats.OtherTierOps) and skipped.
	Medium scoring.Medium
}

// Apply carries one event batch of one worker to the shard that owns the worker. The shard applies the
// ops in order and publishes them to readers. Done, when set, is closed once the ops are applied.
type Apply struct {
	WorkerID uint64
	Ops      []Op
	Done     chan struct{}
}

// ClearWorker drops every block of every dp rank of a worker (resync); the worker stays assigned to its
// shard.
type ClearWorker struct {
	WorkerID uint64
	Done     chan struct{}
}

// ClearRank drops the blocks of one dp rank of a worker (that rank's engine restarted); the other ranks
// keep theirs.
type ClearRank struct {
	WorkerID uint64
	DPRank   uint32
	Done     chan struct{}
}

// RemoveWorker drops a worker's blocks and forgets it.
type RemoveWorker struct {
	WorkerID uint64
	Done     chan struct{}
}

// Barrier is answered (Done closed) once every message sent to the shard before it has been applied.
type Barrier struct{ Done chan struct{} }

// Query asks a shard for overlap scores through a reply channel. It exists to measure the
// message-passing read path against the read-lock path (see doc.go); FindMatches does not use it.
type Query struct {
	Local []uint64
	Reply chan []prefix.Score
}

func (*Apply) shardMessage()        {}
func (*ClearWorker) shardMessage()  {}
func (*ClearRank) shardMessage()    {}
func (*RemoveWorker) shardMessage() {}
func (*Barrier) shardMessage()      {}
func (*Query) shardMessage()        {}

// drainPending tells the shard actor that batches are waiting (shard.enqueue).
type drainPending struct{}

func (*drainPending) shardMessage() {}
