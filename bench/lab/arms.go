package lab

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Arm names.
const (
	ArmKV          = "kv"
	ArmKVDynamo    = "kv-dynamo"
	ArmKVApprox    = "kv-approx"
	ArmKVScale8    = "kv-scale8"
	ArmKVNoPredict = "kv-nopredict"
	ArmKVDecode    = "kv-decode"
	ArmRoundRobin  = "round-robin"
	ArmRandom      = "random"
	ArmLeastLoaded = "least-loaded"
	ArmLLMD        = "llmd"
	ArmSGLang      = "sglang"
)

// Arms are the built-in arms, in report order. Every one is the production scheduler (scoring/sched)
// with another configuration, selector or index.
var Arms = []Arm{
	{ArmKV, "scoring/sched, kv mode, the router's defaults (--router-preset kvroute: the calibrated cost) over the KV-event index", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newMachineArm(f, seed, modeConfig(f, scoring.ModeKV), primaryIndex{f.index}, nil)
	}},
	{ArmKVDynamo, "kv with --router-preset dynamo: Dynamo's linear cost and default weights", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.Preset = scoring.PresetDynamo
		return newMachineArm(f, seed, c, primaryIndex{f.index}, nil)
	}},
	{ArmKVApprox, "kv without KV events: the machine's approximate index of routed prompts (TTL 120 s)", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.UseKVEvents = false
		return newMachineArm(f, seed, c, primaryIndex{prefix.New()}, nil)
	}},
	{ArmKVScale8, "kv-dynamo with --router-prefill-load-scale 8 (diagnostic)", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.Preset, c.PrefillLoadScale = scoring.PresetDynamo, 8
		return newMachineArm(f, seed, c, primaryIndex{f.index}, nil)
	}},
	{ArmKVNoPredict, "kv without predict-on-route (--router-predicted-ttl-secs 0): only the engines' KV events say what is cached", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.PredictedTTL = scoring.SomeDuration(0)
		return newMachineArm(f, seed, c, primaryIndex{f.index}, nil)
	}},
	{ArmKVDecode, "kv with --router-decode-weight 1: the kvroute cost with the decode a request adds where it goes", func(f *Fleet, seed uint64) (Scheduler, error) {
		c := modeConfig(f, scoring.ModeKV)
		c.DecodeWeight = 1
		return newMachineArm(f, seed, c, primaryIndex{f.index}, nil)
	}},
	{ArmRoundRobin, "scoring/sched, mode round-robin", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newMachineArm(f, seed, modeConfig(f, scoring.ModeRoundRobin), primaryIndex{f.index}, nil)
	}},
	{ArmRandom, "scoring/sched, mode random", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newMachineArm(f, seed, modeConfig(f, scoring.ModeRandom), primaryIndex{f.index}, nil)
	}},
	{ArmLeastLoaded, "scoring/sched, mode least-loaded", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newMachineArm(f, seed, modeConfig(f, scoring.ModeLeastLoaded), primaryIndex{f.index}, nil)
	}},
	{ArmLLMD, "llm-d EPP: 2:1:1 prefix (KV-event index) / queue / KV-utilization scorers, max score (bench.LLMDSelector)", func(f *Fleet, seed uint64) (Scheduler, error) {
		return newMachineArm(f, seed, modeConfig(f, scoring.ModeKV), primaryIndex{f.index}, bench.NewLLMDSelector(f.BlockSize))
	}},
	{ArmSGLang, "sgl-router cache_aware over its own approximate tree of routed prompts, no KV events (bench.SGLangSelector)", newSGLangArm},
}

// ArmNames lists the built-in arms in order.
func ArmNames() []string {
	out := make([]string, len(Arms))
	for i, a := range Arms {
		out[i] = a.Name
	}
	return out
}

// LookupArm returns the named built-in arm.
func LookupArm(name string) (Arm, error) {
	i := slices.IndexFunc(Arms, func(a Arm) bool { return a.Name == name })
	if i < 0 {
		return Arm{}, fmt.Errorf("%w: unknown arm %q (have %v)", ErrBadConfig, name, ArmNames())
	}
	return Arms[i], nil
}

func modeConfig(f *Fleet, mode scoring.RouterMode) scoring.Config {
	c := scoring.DefaultConfig()
	c.Mode = mode
	c.BlockSize = f.BlockSize
	return c
}

// newRNG is the seeded source of the generators' random choices.
func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
