package load

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

// Errors. Unknown request ids are not errors (Free after expiry is normal); the calls report found.
var (
	// ErrDuplicate: AddRequest for an id that is already active on this worker.
	ErrDuplicate = errors.New("load: request already active")
	// ErrBadConfig wraps Validate failures.
	ErrBadConfig = errors.New("load: invalid config")
)

// DefaultCleanupInterval is how often AddRequest sweeps stale requests (Dynamo single.rs: at most every
// 30 s).
const DefaultCleanupInterval = 30 * time.Second

// Config of one worker's tracker. Every field mirrors a router flag; see ConfigFrom.
type Config struct {
	// BlockSize in tokens, for output-block boundaries. Default 16.
	BlockSize int
	// TrackActiveBlocks: count prompt blocks at all. Default true; prefill-only routers turn it off.
	TrackActiveBlocks bool
	// AssumeKVReuse: key blocks by the request's sequence hashes, so shared prefixes count once. When
	// false every block gets a fresh hash. Default true.
	AssumeKVReuse bool
	// TrackPrefillTokens: charge ISL − cached tokens until MarkPrefillCompleted. Default true.
	TrackPrefillTokens bool
	// TrackOutputBlocks: add a block per generated block boundary. Default false.
	TrackOutputBlocks bool
	// Stride keeps one hash per Stride complete prompt blocks and counts it Stride times. Default 1.
	Stride int
	// StaleExpiry drops requests never freed after this long. Default 3600 s.
	StaleExpiry time.Duration
	// CleanupInterval bounds how often AddRequest sweeps for stale requests. Default 30 s.
	CleanupInterval time.Duration
}

// DefaultConfig returns Dynamo's defaults.
func DefaultConfig() Config {
	return Config{
		BlockSize:          16,
		TrackActiveBlocks:  true,
		AssumeKVReuse:      true,
		TrackPrefillTokens: true,
		Stride:             1,
		StaleExpiry:        scoring.DefaultStaleExpiry,
		CleanupInterval:    DefaultCleanupInterval,
	}
}

// ConfigFrom takes the load-tracking fields of a router config.
func ConfigFrom(c *scoring.Config) Config {
	d := DefaultConfig()
	d.BlockSize = c.BlockSize
	d.TrackActiveBlocks = c.TrackActiveBlocks
	d.AssumeKVReuse = c.AssumeKVReuse
	d.TrackPrefillTokens = c.TrackPrefillTokens
	d.TrackOutputBlocks = c.TrackOutputBlocks
	d.Stride = c.ActiveSequenceStride
	d.StaleExpiry = c.StaleExpiry
	d.CleanupInterval = min(d.CleanupInterval, c.StaleExpiry/10) // a request expires at most a tenth late
	return d
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d", ErrBadConfig, c.BlockSize)
	case c.Stride < 1:
		return fmt.Errorf("%w: stride %d", ErrBadConfig, c.Stride)
	case c.StaleExpiry <= 0 || c.CleanupInterval < 0:
		return fmt.Errorf("%w: stale expiry %v, cleanup interval %v", ErrBadConfig, c.StaleExpiry, c.CleanupInterval)
	}
	return nil
}

// Request is AddRequest's input.
type Request struct {
	ID string
	// SeqHashes key the prompt's full blocks: a chain in which each value identifies its block and every
	// block before it (the router passes scoring.ChainHashes; scoring.SequenceHashes has the property too).
	SeqHashes []uint64
	// ISL is the prompt length in tokens.
	ISL int
	// OverlapBlocks is this worker's device overlap at routing time; cached tokens = min(overlap ×
	// block size, ISL).
	OverlapBlocks uint32
	// ExpectedOutputTokens (nvext.agent_hints.osl) weights output blocks by remaining progress; 0 unknown.
	ExpectedOutputTokens int
	// Sequences is the request's n: sequences forked from one prefill (vLLM shares the prompt's blocks
	// among them), each decoding its own output. The prompt is charged once; the request counts as n
	// active sequences and its output blocks n times. 0 or 1: one.
	Sequences int
	// AssumeKVReuse and TrackPrefillTokens, when non-nil, override the config for this request
	// (RouterConfigOverride).
	AssumeKVReuse      *bool
	TrackPrefillTokens *bool
	// Now is the routing time (the injected clock).
	Now time.Time
}

type entry struct {
	end         *chainNode // where the request's tracked chain ends in the trie (nil: none)
	private     int        // tracked blocks unique to the request (no KV reuse)
	prefill     uint64     // outstanding prefill charge in tokens
	prefilling  bool       // charged and not yet completed
	started     time.Time
	expectedOut int
	outTokens   int
	outBlocks   int
	outWeight   float64 // contribution of output blocks to fractional load
	seqs        int     // sequences decoding (n), at least 1
}

// Tracker is one worker's (worker, dp_rank) active-sequence state. Single writer: the worker
// actor. Projection and Snapshot are reads; see the package doc for how readers reach them.
type Tracker struct {
	cfg         Config
	blocks      chainTrie // the union of the active requests' tracked chains
	private     int       // tracked blocks of requests without KV reuse (never shared)
	scratch     []uint64  // strided chain of the call in progress
	reqs        map[string]*entry
	prefill     uint64
	fractional  float64
	prefilling  int
	seqs        int // sequences of the active requests (a request with n > 1 counts n)
	lastCleanup time.Time
}

// New returns an empty tracker. cfg must be valid.
func New(cfg Config) *Tracker {
	return &Tracker{cfg: cfg, reqs: make(map[string]*entry)}
}

// Config returns the tracker's configuration.
func (t *Tracker) Config() Config { return t.cfg }

// tracked returns the hashes a prompt's chain is tracked by: every Stride-th block, the incomplete last
// group dropped. With stride 1 that is the chain itself; otherwise a scratch copy valid until the next
// call.
func (t *Tracker) tracked(seq []uint64) []uint64 {
	stride := t.cfg.Stride
	if stride == 1 {
		return seq
	}
	t.scratch = t.scratch[:0]
	for i := stride - 1; i < len(seq); i += stride {
		t.scratch = append(t.scratch, seq[i])
	}
	return t.scratch
}

// AddRequest charges a routed request to this worker: refcount every tracked prompt hash and charge
// ISL − cached prefill tokens. Owners call MaybeExpire first (Dynamo sweeps lazily on add), so the ids of
// dropped requests reach them.
func (t *Tracker) AddRequest(r Request) error {
	if _, ok := t.reqs[r.ID]; ok {
		return fmt.Errorf("%w: %q", ErrDuplicate, r.ID)
	}
	reuse := t.cfg.AssumeKVReuse
	if r.AssumeKVReuse != nil {
		reuse = *r.AssumeKVReuse
	}
	trackPrefill := t.cfg.TrackPrefillTokens
	if r.TrackPrefillTokens != nil {
		trackPrefill = *r.TrackPrefillTokens
	}
	e := &entry{started: r.Now, expectedOut: r.ExpectedOutputTokens, seqs: max(r.Sequences, 1)}
	t.seqs += e.seqs
	if t.cfg.TrackActiveBlocks {
		if reuse {
			e.end = t.blocks.insert(t.tracked(r.SeqHashes))
		} else {
			// Fresh hashes never match another chain: counting them is all they would do.
			e.private = len(r.SeqHashes) / t.cfg.Stride
			t.private += e.private
		}
	}
	if trackPrefill {
		cached := min(int(r.OverlapBlocks)*t.cfg.BlockSize, r.ISL)
		e.prefill = uint64(max(r.ISL-cached, 0))
		e.prefilling = true
		t.prefill += e.prefill
		t.prefilling++
	}
	t.reqs[r.ID] = e
	return nil
}

// MarkPrefillCompleted removes the request's prefill charge at its first output token; its blocks stay.
// It reports whether the request was active.
func (t *Tracker) MarkPrefillCompleted(id string) bool {
	e, ok := t.reqs[id]
	if !ok {
		return false
	}
	t.clearPrefill(e)
	return true
}

func (t *Tracker) clearPrefill(e *entry) {
	if e.prefilling {
		t.prefill -= e.prefill
		e.prefill = 0
		e.prefilling = false
		t.prefilling--
	}
}

// Free ends a request (completion, error or cancel): drops any prefill charge and its block refs; blocks
// at refcount 0 leave. It reports whether the request was active.
func (t *Tracker) Free(id string) bool {
	e, ok := t.reqs[id]
	if !ok {
		return false
	}
	t.free(id, e)
	return true
}

func (t *Tracker) free(id string, e *entry) {
	t.clearPrefill(e)
	t.blocks.release(e.end)
	t.private -= e.private
	t.fractional -= e.outWeight
	t.seqs -= e.seqs
	if len(t.reqs) == 1 {
		t.fractional = 0 // no drift once idle
	}
	delete(t.reqs, id)
}

// MaybeExpire runs Expire when CleanupInterval has passed since the last sweep (Dynamo: at most every
// 30 s, lazily on add) and returns the dropped ids; otherwise nil.
func (t *Tracker) MaybeExpire(now time.Time) []string {
	if t.cfg.CleanupInterval != 0 && now.Sub(t.lastCleanup) < t.cfg.CleanupInterval {
		return nil
	}
	return t.Expire(now)
}

// Expire frees every request started more than StaleExpiry before now and returns their ids, so the
// owner can count them and drop them elsewhere (the Registry, the request index).
func (t *Tracker) Expire(now time.Time) []string {
	t.lastCleanup = now
	var gone []string
	for id, e := range t.reqs {
		if now.Sub(e.started) > t.cfg.StaleExpiry {
			gone = append(gone, id)
			t.free(id, e)
		}
	}
	return gone
}

// RecordOutput reports that request id has generated outputTokens tokens in total. With
// TrackOutputBlocks each crossed block boundary adds a block unique to the request; with an expected
// output length those blocks weigh 1 − progress (they will be freed soon), otherwise 1.
func (t *Tracker) RecordOutput(id string, outputTokens int) bool {
	e, ok := t.reqs[id]
	if !ok {
		return false
	}
	if !t.cfg.TrackOutputBlocks || outputTokens <= e.outTokens {
		return true
	}
	e.outTokens = outputTokens
	// outputTokens counts every sequence's tokens: each sequence holds its own output blocks.
	e.outBlocks = outputTokens / e.seqs / t.cfg.BlockSize * e.seqs
	w := 1.0
	if e.expectedOut > 0 {
		w = max(0, 1-float64(outputTokens/e.seqs)/float64(e.expectedOut))
	}
	t.fractional -= e.outWeight
	e.outWeight = float64(e.outBlocks) * w
	t.fractional += e.outWeight
	return true
}

// Snapshot is the load a worker publishes for the selector. Immutable once published.
type Snapshot struct {
	// ActivePrefillTokens is the outstanding prefill charge in tokens.
	ActivePrefillTokens uint64
	// ActiveDecodeBlocks is unique active blocks × stride plus fractional output blocks.
	ActiveDecodeBlocks float64
	// UniqueBlocks is the number of distinct tracked hashes.
	UniqueBlocks int
	// ActiveRequests counts the sequences of the requests between AddRequest and Free (a request with
	// n > 1 decodes n sequences).
	ActiveRequests int
	// PrefillingRequests counts requests not yet MarkPrefillCompleted.
	PrefillingRequests int
}

// Snapshot returns the current load.
func (t *Tracker) Snapshot() Snapshot {
	return Snapshot{
		ActivePrefillTokens: t.prefill,
		ActiveDecodeBlocks:  float64(t.uniqueBlocks()*t.cfg.Stride) + t.fractional,
		UniqueBlocks:        t.uniqueBlocks(),
		ActiveRequests:      t.seqs,
		PrefillingRequests:  t.prefilling,
	}
}

// uniqueBlocks is the number of distinct tracked hashes.
func (t *Tracker) uniqueBlocks() int { return t.blocks.unique + t.private }

// Projection returns additional_active_blocks for a candidate request: how many of its blocks (sequence
// hashes, unstrided) are not active here.
//
// Sequence hashes chain, and every request adds the whole chain of its prompt, so the hashes of one chain
// that are active on a worker always form a prefix of it: Projection is one walk down the trie of active
// chains (trie.go), with a binary search inside each edge, cheap at 256+ workers.
func (t *Tracker) Projection(seqHashes []uint64, assumeReuse bool) uint64 {
	if !t.cfg.TrackActiveBlocks {
		return 0
	}
	q := t.tracked(seqHashes)
	if !assumeReuse || t.blocks.unique == 0 {
		return uint64(len(q) * t.cfg.Stride)
	}
	return uint64((len(q) - t.blocks.activePrefix(q)) * t.cfg.Stride)
}

// Sharing returns how many of a request's leading blocks (sequence hashes, unstrided) are active here
// and how many active requests hold every one of them: the live part of its prefix and its sharers.
func (t *Tracker) Sharing(seqHashes []uint64) (blocks uint64, requests int) {
	if !t.cfg.TrackActiveBlocks || t.blocks.unique == 0 {
		return 0, 0
	}
	pos, n := t.blocks.sharedPrefix(t.tracked(seqHashes))
	return uint64(pos * t.cfg.Stride), int(n)
}

// Load returns the scoring view of this worker for a request: the snapshot plus the request's projection.
func (t *Tracker) Load(seqHashes []uint64, assumeReuse bool) scoring.Load {
	s := t.Snapshot()
	return s.Load(t.Projection(seqHashes, assumeReuse))
}

// Load converts a snapshot plus a projection into the scoring view.
func (s Snapshot) Load(additional uint64) scoring.Load {
	return scoring.Load{
		Known:               true,
		ActivePrefillTokens: s.ActivePrefillTokens,
		ActiveDecodeBlocks:  s.ActiveDecodeBlocks,
		AdditionalBlocks:    additional,
		ActiveRequests:      uint32(s.ActiveRequests),
	}
}

// Active reports whether id is an active request here.
func (t *Tracker) Active(id string) bool {
	_, ok := t.reqs[id]
	return ok
}

// Requests yields the id of every active request here, in no order; the tracker must not change
// while it runs.
func (t *Tracker) Requests() iter.Seq[string] { return maps.Keys(t.reqs) }
