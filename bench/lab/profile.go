package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/kvroute/kvroute/workers/mocker"
)

// Profile is one engine model: the simulated engine's capacity and its step-time model. The engine's
// scheduler is always the mocker's (workers/mocker.Engine); a profile only sets its configuration.
type Profile struct {
	// Name is the --profile value.
	Name string `json:"name"`
	// Note says where the numbers come from (shown in the report).
	Note string `json:"note,omitempty"`
	// NumGPUBlocks is the KV capacity in blocks of the lab's block size (64 tokens by default).
	NumGPUBlocks int `json:"num_gpu_blocks"`
	// MaxNumSeqs and MaxNumBatchedTokens are vLLM's batch limits.
	MaxNumSeqs          int `json:"max_num_seqs"`
	MaxNumBatchedTokens int `json:"max_num_batched_tokens"`
	// Timing is the fitted step-time model; nil is Dynamo's polynomial (mocker.StepDuration).
	Timing *mocker.Timing `json:"timing,omitempty"`
}

// ReadProfile parses a profile from JSON (--profile-file): the fields of Profile, Timing's under
// "timing" with mocker.Timing's field names. Unknown fields are an error, so a misspelt coefficient does
// not silently become zero.
func ReadProfile(r io.Reader) (Profile, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: profile: %v", ErrBadConfig, err)
	}
	if p.Name == "" {
		return Profile{}, fmt.Errorf("%w: profile without a name", ErrBadConfig)
	}
	c := p.EngineConfig(64)
	if err := c.Validate(); err != nil {
		return Profile{}, fmt.Errorf("%w: profile %s: %v", ErrBadConfig, p.Name, err)
	}
	return p, nil
}

// Profile names.
const (
	ProfileMocker   = "mocker"
	ProfileLlama8B  = "llama8b-h100"
	ProfileLlama70B = "llama70b-fp8-h200"
)

// Profiles are the built-in engine profiles; the package doc explains every number.
var Profiles = []Profile{
	{
		Name:         ProfileMocker,
		Note:         "Dynamo's mocker polynomial (64-token prefill block ≈ 1 ms; decode 5.7–34 ms by KV occupancy), 16,384 blocks",
		NumGPUBlocks: 16384, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
	},
	{
		Name:         ProfileLlama8B,
		Note:         "Llama-3.1-8B BF16 on one H100 SXM (vLLM, chunked prefill 8192): 31k prefill tok/s, decode 6.5 ms + KV reads",
		NumGPUBlocks: 6400, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
		Timing: &mocker.Timing{
			PrefillBaseMs: 5, PrefillPerTokenMs: 0.032, PrefillAttnMsPerMPair: 1.3,
			DecodeBaseMs: 6.5, DecodePerSeqMs: 0.05, DecodePerKTokenMs: 0.039,
		},
	},
	{
		Name:         ProfileLlama70B,
		Note:         "Llama-3.1-70B FP8 weights, BF16 KV, on one H200 (vLLM, chunked prefill 8192): 6.4k prefill tok/s, decode 16.2 ms + KV reads",
		NumGPUBlocks: 2560, MaxNumSeqs: 256, MaxNumBatchedTokens: 8192,
		Timing: &mocker.Timing{
			PrefillBaseMs: 15, PrefillPerTokenMs: 0.157, PrefillAttnMsPerMPair: 6.6,
			DecodeBaseMs: 16.2, DecodePerSeqMs: 0.1, DecodePerKTokenMs: 0.068,
		},
	},
}

// ProfileNames lists the built-in profiles in order.
func ProfileNames() []string {
	out := make([]string, len(Profiles))
	for i, p := range Profiles {
		out[i] = p.Name
	}
	return out
}

// LookupProfile returns the named profile among extra (first) and the built-in ones.
func LookupProfile(name string, extra ...Profile) (Profile, error) {
	all := append(slices.Clone(extra), Profiles...)
	i := slices.IndexFunc(all, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		return Profile{}, fmt.Errorf("%w: unknown engine profile %q (have %v)", ErrBadConfig, name, ProfileNames())
	}
	return all[i], nil
}

// EngineConfig is the mocker configuration of one simulated engine of this profile.
func (p *Profile) EngineConfig(blockSize int) mocker.EngineConfig {
	c := mocker.DefaultEngineConfig()
	c.BlockSize = blockSize
	c.NumGPUBlocks, c.MaxNumSeqs, c.MaxNumBatchedTokens = p.NumGPUBlocks, p.MaxNumSeqs, p.MaxNumBatchedTokens
	c.Timing = p.Timing
	return c
}
