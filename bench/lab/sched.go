package lab

import (
	"errors"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// ErrBadConfig classes every configuration error of the lab.
var ErrBadConfig = errors.New("lab: bad config")

// Request is one request as a scheduler sees it: its prompt tokens and the router's block hashes of them
// (scoring.PromptHashes at the fleet's block size), computed once when it arrives. Everything is read-only
// for the scheduler; Prompt is also the engine's.
type Request struct {
	// ID is unique in a run ("r" + trace index).
	ID string
	// ISL is the prompt length in tokens; OSL the tokens to generate (max_tokens).
	ISL, OSL int
	Prompt   []uint32
	// Local are the router's local block hashes of the prompt's full blocks; Chain their prefix chain
	// (what load tracking keys blocks by).
	Local, Chain []uint64
}

// Route is a scheduler's answer for one request.
type Route struct {
	// Worker is the fleet index in [0, Workers) the request goes to; ignored when Queued.
	Worker int
	// Queued means the scheduler holds the request; it comes back later as a Released.
	Queued bool
	// OverlapBlocks is the device overlap the scheduler predicted on Worker (0 when it does not know),
	// reported as the predicted hit rate.
	OverlapBlocks int
}

// Released is a queued request the scheduler lets go, with its worker, or with the error that ends it.
type Released struct {
	ID     string
	Worker int
	// OverlapBlocks as in Route.
	OverlapBlocks int
	Err           error
}

// Scheduler is what an arm plugs into the lab: the routing decision and the two lifecycle notifications
// that free capacity. Time is passed in (the lab's virtual clock); a scheduler never reads a clock, never
// blocks and is driven from one goroutine. PrefillDone comes at the request's first token, Free when it
// ends (finished or failed); each may release queued requests, which the lab dispatches at once.
type Scheduler interface {
	Route(now time.Time, r *Request) (Route, error)
	PrefillDone(now time.Time, id string) []Released
	Free(now time.Time, id string) []Released
}

// OutputRecorder is implemented by a scheduler that learns from what a request generated: the lab tells
// it a request's output tokens when the request ends, before Free, as a router's frontend counts the
// tokens it streamed.
type OutputRecorder interface {
	Output(id string, tokens int)
}

// Ticker is implemented by a scheduler with timers of its own (expiry); the lab calls Tick every
// MetricsInterval.
type Ticker interface {
	Tick(now time.Time) []Released
}

// Matcher is the part of the prefix index a scheduler reads: *prefix.Index.
type Matcher interface {
	FindMatches(localHashes []uint64, out []prefix.Score) []prefix.Score
}

var _ Matcher = (*prefix.Index)(nil)

// Fleet is what a scheduler may know about the simulated fleet: its shape, the production prefix index
// fed by the engines' KV events (after the configured event delay) and the engines' KV usage as last
// scraped (vllm:kv_cache_usage_perc every MetricsInterval). It is owned by the run; schedulers read it
// during their calls only.
type Fleet struct {
	Workers             int
	BlockSize           int
	TotalKVBlocks       int
	MaxNumBatchedTokens int
	// Index is the KV-event index.
	Index Matcher
	// index is the same index with its writers, for the production scheduler's adapter (which writes
	// only in approximate mode).
	index  *prefix.Index
	kvUsed []uint64
	// pending is the prefill worker w's engine has not finished (not started, mocker.Engine.PendingPrefill,
	// or in the step in flight), for the explained decisions; nil outside a run.
	pending func(w int) int
	scrapes uint64
}

// Key is worker w's key in the index and in scoring (worker ids start at 1, dp rank 0).
func Key(w int) scoring.WorkerKey { return scoring.WorkerKey{WorkerID: uint64(w) + 1} }

// WorkerOf is the fleet index of a key (Key's inverse).
func WorkerOf(k scoring.WorkerKey) int { return int(k.WorkerID) - 1 }

// KVUsed returns worker w's scraped KV blocks in use, and false before the first scrape.
func (f *Fleet) KVUsed(w int) (uint64, bool) {
	if f.scrapes == 0 || w < 0 || w >= len(f.kvUsed) {
		return 0, false
	}
	return f.kvUsed[w], true
}

// Arm builds a fresh scheduler for one run: the fleet view and a seed for its random choices.
type Arm struct {
	Name string
	// Doc says what the arm is (one line, for the report).
	Doc string
	New func(f *Fleet, seed uint64) (Scheduler, error)
}
