package scoring

import (
	"errors"
	"flag"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigMatchesDynamo(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"mode", c.Mode, ModeKV}, // the one default that differs from Dynamo's frontend (round-robin), on purpose
		{"credit", c.OverlapScoreCredit, 1.0},
		{"decay", c.OverlapScoreCreditDecay, 0.0},
		{"scale", c.PrefillLoadScale, 1.0},
		{"host", c.HostCacheHitWeight, 0.75},
		{"disk", c.DiskCacheHitWeight, 0.25},
		{"shared", c.SharedCacheMultiplier, 0.5},
		{"temperature", c.Temperature, 0.0},
		{"ttl", c.TTL, 120 * time.Second},
		{"events", c.UseKVEvents, true},
		{"threads", c.EventThreads, 0}, // unset: Dynamo's 4, at most GOMAXPROCS (IndexShards)
		{"reuse", c.AssumeKVReuse, true},
		{"prefill", c.TrackPrefillTokens, true},
		{"active", c.TrackActiveBlocks, true},
		{"output", c.TrackOutputBlocks, false},
		{"queue", c.QueueThreshold.Set, false},
		{"policy", c.QueuePolicy, QueueFCFS},
		{"refresh", c.OverlapRefreshAfter, 10 * time.Second},
		{"ratio", c.EncoderCudaToCPURatio, 8.0},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"mode", func(c *Config) { c.Mode = "fastest" }},
		{"negative credit", func(c *Config) { c.OverlapScoreCredit = -1 }},
		{"host weight > 1", func(c *Config) { c.HostCacheHitWeight = 1.5 }},
		{"block size", func(c *Config) { c.BlockSize = 0 }},
		{"queue policy", func(c *Config) { c.QueuePolicy = "sjf" }},
		{"negative queue threshold", func(c *Config) { c.QueueThreshold = Some(-1) }},
		{"decode threshold > 1", func(c *Config) { c.ActiveDecodeBlocksThreshold = Some(2) }},
		{"aic", func(c *Config) { c.PrefillLoadModel = "aic" }},
		{"ttl", func(c *Config) { c.TTL = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
				t.Fatalf("Validate = %v, want ErrBadConfig", err)
			}
		})
	}
}

func TestResolved(t *testing.T) {
	tests := []struct {
		name                 string
		mod                  func(*Config)
		credit, scale        float64
		mode                 RouterMode
		events, reuse, track bool
	}{
		{"defaults", func(*Config) {}, 1, 1, ModeKV, true, true, true},
		{"weight 2", func(c *Config) { c.OverlapScoreWeight = Some(2); c.PrefillLoadScale = 5 }, 1, 2, ModeKV, true, true, true},
		{"weight 0", func(c *Config) { c.OverlapScoreWeight = Some(0) }, 0, 0, ModeKV, true, true, true},
		{"load-aware", func(c *Config) { c.LoadAware = true; c.PrefillLoadScale = 3; c.TrackPrefillTokens = false }, 0, 3, ModeKV, false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			r := c.Resolved()
			if r.OverlapScoreCredit != tc.credit || r.PrefillLoadScale != tc.scale || r.Mode != tc.mode ||
				r.UseKVEvents != tc.events || r.AssumeKVReuse != tc.reuse || r.TrackPrefillTokens != tc.track {
				t.Fatalf("resolved %+v", r)
			}
		})
	}
}

func TestOverride(t *testing.T) {
	c := kvConfig()
	two, zero := 2.0, 0.0
	no := false
	got, err := c.WithOverride(&Override{Temperature: &two, TrackPrefillTokens: &no})
	if err != nil || got.Temperature != 2 || got.TrackPrefillTokens || c.Temperature != 0 {
		t.Fatalf("override %+v %v", got, err)
	}
	got, _ = c.WithOverride(&Override{PrefillLoadScale: &two, OverlapScoreWeight: &zero})
	if got.PrefillLoadScale != 0 || got.OverlapScoreCredit != 0 {
		t.Fatalf("legacy weight must win: %+v", got)
	}
	neg := -1.0
	if _, err := c.WithOverride(&Override{Temperature: &neg}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("bad override accepted: %v", err)
	}
}

func TestFlagsPrecedence(t *testing.T) {
	env := map[string]string{
		"DYN_ROUTER_TEMPERATURE":          "0.5",
		"DYN_ROUTER_PREFILL_LOAD_SCALE":   "3",
		"DYN_ROUTER_USE_KV_EVENTS":        "false",
		"DYN_ROUTER_QUEUE_THRESHOLD":      "1.5",
		"DYN_OVERLAP_SCORE_WEIGHT":        "0.25",
		"DYN_ENCODER_CUDA_TO_CPU_RATIO":   "4",
		"DYN_ROUTER_TRACK_PREFILL_TOKENS": "false",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	if err := RegisterFlagsEnv(fs, &c, lookup); err != nil {
		t.Fatal(err)
	}
	err := fs.Parse([]string{"--router-prefill-load-scale=2", "--router-kv-events", "--router-ttl-secs", "30",
		"--router-selection-policy=linear", "--router-track-prefill-tokens", "--no-router-assume-kv-reuse",
		"--active-prefill-tokens-threshold", "1000", "--router-block-size", "128"})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"env temperature", c.Temperature, 0.5},
		{"flag beats env", c.PrefillLoadScale, 2.0},
		{"bool flag beats env", c.UseKVEvents, true},
		{"opt env", c.QueueThreshold, Some(1.5)},
		{"env alias", c.OverlapScoreWeight, Some(0.25)},
		{"env only", c.EncoderCudaToCPURatio, 4.0},
		{"ttl seconds", c.TTL, 30 * time.Second},
		{"policy alias", c.SelectionPolicy, PolicyDefault},
		{"bool flag beats env false", c.TrackPrefillTokens, true},
		{"neg flag", c.AssumeKVReuse, false},
		{"opt flag", c.ActivePrefillTokensThreshold, Some(1000)},
		{"block size alias", c.BlockSize, 128},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	bad := DefaultConfig()
	err = RegisterFlagsEnv(flag.NewFlagSet("t", flag.ContinueOnError), &bad,
		func(k string) (string, bool) { return "x", k == "DYN_ROUTER_TEMPERATURE" })
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("bad env: %v", err)
	}
}

func TestFlagTableComplete(t *testing.T) {
	seen := map[string]bool{}
	for i := range Flags {
		f := &Flags[i]
		if f.Name == "" && f.Env == "" {
			t.Errorf("flag %d has neither name nor env", i)
		}
		if f.Help == "" || f.Default() == "" {
			t.Errorf("%s: missing help or default", f.Name)
		}
		for _, n := range append([]string{f.Name, f.Neg}, f.Aliases...) {
			if n != "" && seen[n] {
				t.Errorf("duplicate flag %s", n)
			}
			seen[n] = true
		}
	}
}

// TestDocsListEveryFlag keeps docs/router.md in step with the flag table.
func TestDocsListEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../docs/router.md")
	if err != nil {
		t.Skip("docs/router.md not found")
	}
	for i := range Flags {
		f := &Flags[i]
		key := "`--" + f.Name + "`"
		if f.Name == "" {
			key = "`" + f.Env + "`"
		}
		if !strings.Contains(string(doc), key) {
			t.Errorf("docs/router.md does not list %s", key)
		}
	}
}

// TestIndexShards: unset, the index has Dynamo's 4 shards but no more than GOMAXPROCS; a set
// --router-event-threads is taken as it is, past the CPUs too.
func TestIndexShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ procs, threads, want int }{{1, 0, 1}, {2, 0, 2}, {4, 0, 4}, {16, 0, 4}, {2, 3, 3}, {16, 8, 8}} {
		runtime.GOMAXPROCS(c.procs)
		cfg := DefaultConfig()
		cfg.EventThreads = c.threads
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.IndexShards(); got != c.want {
			t.Errorf("GOMAXPROCS %d, --router-event-threads %d: %d shards, want %d", c.procs, c.threads, got, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.EventThreads = -1
	if cfg.Validate() == nil {
		t.Error("--router-event-threads -1 accepted")
	}
}

// TestIndexWarmRange: the warming period is 0 (never) or at least MinIndexWarm, for the router's flag.
func TestIndexWarmRange(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {MinIndexWarm, true}, {DefaultIndexWarm, true}, {-time.Millisecond, false}, {MinIndexWarm - 1, false}} {
		cfg := DefaultConfig()
		cfg.IndexWarm = c.d
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("--router-index-warm-secs %v: %v, want accepted %v", c.d.Seconds(), err, c.ok)
		}
	}
}
