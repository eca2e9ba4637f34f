package router

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvroute/kvroute/actors/indexer"
	"github.com/kvroute/kvroute/actors/worker"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/workers/registry"
)

// Config configures the router core.
type Config struct {
	// BlockSize is the KV block size in tokens used to hash requests and re-key events; it must equal the
	// engines' block size. Dynamo's standalone router defaults to 128 (--router-block-size); kvroute
	// takes 16, vLLM's default.
	BlockSize int
	// Indexer configures the sharded index (--router-event-threads shards).
	Indexer indexer.Config
	// Worker configures the mirrors.
	Worker worker.Config
}

// DefaultConfig returns the defaults for a block size.
func DefaultConfig(blockSize int) Config {
	return Config{BlockSize: blockSize, Indexer: indexer.DefaultConfig(), Worker: worker.DefaultConfig(blockSize)}
}

// Router is the routing core shared by `kvroute router` and the frontend: the sharded index, the fleet of
// worker mirrors feeding it, and the request-side hashing.
type Router struct {
	cfg   Config
	Index *indexer.Indexer
	Fleet *worker.Fleet
}

// New starts the index and the fleet in system.
func New(system *actor.ActorSystem, cfg Config) (*Router, error) {
	if cfg.BlockSize <= 0 {
		return nil, fmt.Errorf("router: block size %d must be positive", cfg.BlockSize)
	}
	cfg.Worker.BlockSize = cfg.BlockSize
	ix, err := indexer.New(system, cfg.Indexer)
	if err != nil {
		return nil, err
	}
	fl, err := worker.NewFleet(system, ix, cfg.Worker)
	if err != nil {
		ix.Stop()
		return nil, err
	}
	return &Router{cfg: cfg, Index: ix, Fleet: fl}, nil
}

// BlockSize returns the hashing block size.
func (r *Router) BlockSize() int { return r.cfg.BlockSize }

// AddWorker starts mirroring a worker.
func (r *Router) AddWorker(spec registry.Spec) error { return r.Fleet.Add(spec) }

// RemoveWorker stops mirroring a worker and drops its blocks.
func (r *Router) RemoveWorker(id uint64) error { return r.Fleet.Remove(id) }

// Workers returns every worker's status.
func (r *Router) Workers() []worker.Status { return r.Fleet.Status() }

// HashTokens appends the local block hashes of tokens (full blocks only) to dst.
func (r *Router) HashTokens(dst []uint64, tokens []uint32, loraName string) []uint64 {
	return scoring.LocalBlockHashes(dst, tokens, r.cfg.BlockSize, scoring.DeriveSeed(loraName, ""), nil)
}

// Overlap appends the overlap of every (worker, dp rank) with the given local block hashes to out.
func (r *Router) Overlap(local []uint64, out []prefix.Score) []prefix.Score {
	return r.Index.FindMatches(local, out)
}

// Stop stops the fleet, then the index.
func (r *Router) Stop() {
	r.Fleet.Stop()
	r.Index.Stop()
}
