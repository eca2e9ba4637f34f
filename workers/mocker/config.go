package mocker

import (
	"errors"
	"fmt"
)

// ErrBadConfig is the class of every configuration error returned by Validate.
var ErrBadConfig = errors.New("mocker: bad config")

// ErrBadRequest is the class of request errors (prompt too long for the KV cache, empty prompt).
var ErrBadRequest = errors.New("mocker: bad request")

// ErrResetBusy is returned by Engine.ResetPrefixCache while blocks are in use, as vLLM refuses the reset then.
var ErrResetBusy = errors.New("mocker: prefix cache reset refused: blocks in use")

// EngineConfig configures one simulated vLLM engine (one dp rank). Defaults follow Dynamo's mocker.
type EngineConfig struct {
	// BlockSize is the number of tokens per KV block. Default 64 (Dynamo's vLLM mocker); vLLM's own
	// default on GPUs is 16. It must equal the router's --kv-cache-block-size.
	BlockSize int
	// NumGPUBlocks is the number of physical KV blocks (Dynamo --num-gpu-blocks-override). Default 16384.
	// Memory is a few words per block; token ids are shared with the requests, not copied.
	NumGPUBlocks int
	// MaxNumSeqs bounds the running batch (vLLM --max-num-seqs). Default 256.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the per-step token budget shared by prefill chunks and decodes
	// (vLLM --max-num-batched-tokens). Default 8192.
	MaxNumBatchedTokens int
	// SpeedupRatio divides every simulated duration ("higher = faster"). Default 1.
	SpeedupRatio float64
	// DecodeSpeedupRatio additionally divides the decode part of a step. Default 1.
	DecodeSpeedupRatio float64
	// HashSeed seeds the engine's block hashes (the analogue of vLLM's NONE_HASH / PYTHONHASHSEED).
	// The hashes are opaque to the router; a fixed seed makes runs reproducible. Default 0.
	HashSeed uint64
	// FillerTokens are the generated token ids, cycled; output i of a request is
	// FillerTokens[(i+len(prompt)) % len]. Default: a short fixed list.
	FillerTokens []uint32
	// MaxModelLen bounds prompt + max_tokens (vLLM --max-model-len). 0 means "whatever fits the KV cache".
	MaxModelLen int
	// DPRank is stamped into every event batch of this engine. Default 0.
	DPRank int
	// Timing, when set, replaces Dynamo's polynomial (StepDuration) with a fitted step-time model that
	// also charges attention over the cached context and decode KV reads (bench/lab's engine profiles).
	// Default nil: the polynomial.
	Timing *Timing
}

// DefaultEngineConfig returns Dynamo's mocker defaults.
func DefaultEngineConfig() EngineConfig {
	return EngineConfig{
		BlockSize:           64,
		NumGPUBlocks:        16384,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		SpeedupRatio:        1,
		DecodeSpeedupRatio:  1,
		FillerTokens:        []uint32{1, 2, 3, 4, 5, 6, 7, 8},
	}
}

// Validate reports the first invalid field, wrapped in ErrBadConfig.
func (c *EngineConfig) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d must be positive", ErrBadConfig, c.BlockSize)
	case c.NumGPUBlocks <= 0:
		return fmt.Errorf("%w: num gpu blocks %d must be positive", ErrBadConfig, c.NumGPUBlocks)
	case c.MaxNumSeqs <= 0:
		return fmt.Errorf("%w: max num seqs %d must be positive", ErrBadConfig, c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("%w: max num batched tokens %d must be positive", ErrBadConfig, c.MaxNumBatchedTokens)
	case !(c.SpeedupRatio > 0):
		return fmt.Errorf("%w: speedup ratio %v must be positive", ErrBadConfig, c.SpeedupRatio)
	case !(c.DecodeSpeedupRatio > 0):
		return fmt.Errorf("%w: decode speedup ratio %v must be positive", ErrBadConfig, c.DecodeSpeedupRatio)
	case len(c.FillerTokens) == 0:
		return fmt.Errorf("%w: filler tokens must not be empty", ErrBadConfig)
	case c.MaxModelLen < 0:
		return fmt.Errorf("%w: max model len %d must not be negative", ErrBadConfig, c.MaxModelLen)
	case c.DPRank < 0:
		return fmt.Errorf("%w: dp rank %d must not be negative", ErrBadConfig, c.DPRank)
	}
	if c.Timing != nil {
		return c.Timing.Validate()
	}
	return nil
}
