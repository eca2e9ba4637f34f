package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

const good = `
default_policy_family: chat
uncached_isl_buckets:
  - {min_tokens: 0, bucket: warm}
  - {min_tokens: 1024, bucket: cold}
policy_classes:
  - name: chat-warm
    policy_family: chat
    cache_bucket: warm
    queue_policy: wspt
    quantum: 4096
    prefill_busy_threshold_frac: 0.8
  - name: chat-cold
    policy_family: chat
    cache_bucket: cold
    quantum: 1024
    prefill_busy_threshold: 2048
    busy_worker_ratio: 0.5
    request_queue_limit_per_worker: 4
  - name: batch-warm
    policy_family: batch
    cache_bucket: warm
    queue_policy: fcfs
    quantum: 512
    prefill_busy_threshold: 0
  - name: batch-cold
    policy_family: batch
    cache_bucket: cold
    quantum: 512
    prefill_busy_threshold: 0
    raw_isl_token_queue_limit_per_worker: 100000
    cached_token_queue_limit_per_worker: 0
  - name: vip
    quantum: 100000
models:
  small-model:
    default_policy_family: all
    uncached_isl_buckets: [{min_tokens: 0, bucket: any}]
    policy_classes:
      - {name: everything, policy_family: all, cache_bucket: any, quantum: 1}
`

func TestParseGood(t *testing.T) {
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profile("")
	if p == nil || p.IsSynthetic() || len(p.Classes) != 5 {
		t.Fatalf("root profile %+v", p)
	}
	name := func(i int) string { return p.Classes[i].Name }
	tests := []struct {
		requested string
		uncached  int
		want      string
	}{
		{"", 0, "chat-warm"},
		{"", 1023, "chat-warm"},
		{"", 1024, "chat-cold"},
		{"", 1 << 30, "chat-cold"},
		{"batch", 10, "batch-warm"},
		{"batch", 5000, "batch-cold"},
		{"vip", 5000, "vip"},
		{"no-such-family", 5000, "chat-cold"}, // unknown names fall back to the default family
		{"chat-warm", 5000, "chat-cold"},      // a cell class's name does not select it
	}
	for _, tc := range tests {
		if got := name(p.Classify(tc.requested, tc.uncached)); got != tc.want {
			t.Errorf("Classify(%q, %d) = %s, want %s", tc.requested, tc.uncached, got, tc.want)
		}
	}
	if i, ok := p.Direct("vip"); !ok || name(i) != "vip" {
		t.Errorf("Direct(vip) = %d %v", i, ok)
	}
	if _, ok := p.Direct("batch"); ok {
		t.Error("a family is not a direct class")
	}
	warm, cold, bw := &p.Classes[0], &p.Classes[1], &p.Classes[2]
	if warm.QueuePolicy != scoring.QueueWSPT || bw.QueuePolicy != scoring.QueueFCFS || cold.QueuePolicy != scoring.QueueFCFS {
		t.Errorf("queue policies %s %s %s", warm.QueuePolicy, bw.QueuePolicy, cold.QueuePolicy)
	}
	if !cold.RequestLimitPerWorker.Set || cold.RequestLimitPerWorker.V != 4 || cold.RawISLTokenLimitPerWorker.Set {
		t.Errorf("limits %+v", cold)
	}
	if p.Classes[4].Queues() {
		t.Error("a class without thresholds queues")
	}
	if m := c.Profile("small-model"); m == nil || len(m.Classes) != 1 || m.Classes[0].Name != "everything" {
		t.Errorf("model profile %+v", m)
	}
	if c.Profile("other-model") != p {
		t.Error("a model without a profile does not get the root")
	}
	if got := c.Models(); len(got) != 1 || got[0] != "small-model" {
		t.Errorf("models %v", got)
	}
}

func TestParseModelsOnly(t *testing.T) {
	c, err := Parse([]byte(`
models:
  m:
    default_policy_family: f
    uncached_isl_buckets: [{min_tokens: 0, bucket: b}]
    policy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile("m") == nil || c.Profile("") != nil || c.Profile("x") != nil {
		t.Error("a models-only document applies to its models only")
	}
}

func TestParseBad(t *testing.T) {
	const head = "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes:\n"
	cell := "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1}\n"
	tests := []struct {
		name, doc, want string
	}{
		{"empty", "", "empty document"},
		{"not yaml", "{", "parse"},
		{"unknown root field", head + cell + "extra: 1\n", "field extra not found"},
		{"unknown class field", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, quantom: 2}\n", "field quantom not found"},
		{"two documents", head + cell + "---\n" + head + cell, "one YAML document"},
		{"partial root", "default_policy_family: f\n", "together"},
		{"nothing", "models: {}\n", "root profile or at least one model"},
		{"no quantum", head + "  - {name: c, policy_family: f, cache_bucket: b}\n", "needs a quantum"},
		{"zero quantum", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 0}\n", "greater than zero"},
		{"negative quantum", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: -1}\n", "parse"},
		{"bad queue policy", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, queue_policy: sjf}\n", "queue_policy"},
		{"lcfs class", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, queue_policy: lcfs}\n", "must be fcfs or wspt"},
		{"negative frac", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, prefill_busy_threshold_frac: -0.5}\n", "finite and non-negative"},
		{"nan frac", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, prefill_busy_threshold_frac: .nan}\n", "finite and non-negative"},
		{"ratio above 1", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, prefill_busy_threshold: 1, busy_worker_ratio: 16}\n", "busy_worker_ratio"},
		{"ratio zero", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, prefill_busy_threshold: 1, busy_worker_ratio: 0}\n", "busy_worker_ratio"},
		{"ratio without threshold", head + "  - {name: c, policy_family: f, cache_bucket: b, quantum: 1, busy_worker_ratio: 0.5}\n", "no worker can ever be busy"},
		{"family without bucket", head + cell + "  - {name: d, policy_family: f, quantum: 1}\n", "both policy_family and cache_bucket"},
		{"unknown bucket", head + "  - {name: c, policy_family: f, cache_bucket: nope, quantum: 1}\n", "unknown cache bucket"},
		{"duplicate class", head + cell + "  - {name: c, quantum: 1}\n", "duplicate policy class \"c\""},
		{"duplicate cell", head + cell + "  - {name: d, policy_family: f, cache_bucket: b, quantum: 1}\n", "duplicate policy classes for family"},
		{"explicit collides with family", head + cell + "  - {name: f, quantum: 1}\n", "collides with a policy family"},
		{"default family missing", "default_policy_family: g\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes:\n" + cell, "does not name a configured family"},
		{"only explicit classes", head + "  - {name: c, quantum: 1}\n", "does not name a configured family"},
		{"matrix hole", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 9, bucket: z}]\npolicy_classes:\n" + cell, "missing a policy class for family \"f\" and bucket \"z\""},
		{"buckets not from 0", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 1, bucket: b}]\npolicy_classes:\n" + cell, "start at min_tokens 0"},
		{"buckets not increasing", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 0, bucket: z}]\npolicy_classes:\n" + cell, "strictly increasing"},
		{"duplicate bucket", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 5, bucket: b}]\npolicy_classes:\n" + cell, "duplicate cache bucket"},
		{"no buckets", "default_policy_family: f\nuncached_isl_buckets: []\npolicy_classes:\n" + cell, "must not be empty"},
		{"no classes", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: []\n", "must not be empty"},
		{"bad class name", head + "  - {name: 'a b', policy_family: f, cache_bucket: b, quantum: 1}\n", "must match"},
		{"empty class name", head + "  - {policy_family: f, cache_bucket: b, quantum: 1}\n", "must match"},
		{"duplicate key", head + "  - {name: c, name: d, policy_family: f, cache_bucket: b, quantum: 1}\n", "already defined"},
		{"incomplete model", "models:\n  m:\n    default_policy_family: f\n", "model \"m\" must specify"},
		{"bad model profile", "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: [{min_tokens: 0, bucket: b}]\n    policy_classes: [{name: c, policy_family: g, cache_bucket: b, quantum: 1}]\n", "model \"m\" default_policy_family"},
		{"worker_selection unsupported", head + cell + "worker_selection: {}\n", "worker_selection is not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxDocumentBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: %v", err)
	}
}

func TestClassBusyAndLimits(t *testing.T) {
	c := Class{Name: "x", PrefillBusyThreshold: Opt{V: 100, Set: true}, PrefillBusyThresholdFrac: scoring.Some(0.5)}
	for _, tc := range []struct {
		prefill, mb uint64
		want        bool
	}{{100, 1000, false}, {101, 1000, true}, {60, 100, true}, {50, 100, false}} {
		if got := c.WorkerBusy(tc.prefill, tc.mb); got != tc.want {
			t.Errorf("WorkerBusy(%d, %d) = %v", tc.prefill, tc.mb, got)
		}
	}
	if c.PoolBusy(127, 128) || !c.PoolBusy(128, 128) || c.PoolBusy(0, 0) {
		t.Error("all-busy rule")
	}
	c.BusyWorkerRatio = scoring.Some(0.95)
	if c.PoolBusy(121, 128) || !c.PoolBusy(122, 128) || c.PoolBusy(1, 2) || !c.PoolBusy(2, 2) {
		t.Error("ratio rule")
	}
	c.RequestLimitPerWorker = Opt{V: 2, Set: true}
	c.CachedTokenLimitPerWorker = Opt{V: 0, Set: true}
	if r := c.Admit(Stats{Requests: 5}, 3); r != nil && r.Kind != "cached_tokens" {
		t.Errorf("limit 0 rejects first: %v", r)
	}
	c.CachedTokenLimitPerWorker = Opt{}
	if r := c.Admit(Stats{Requests: 5}, 3); r != nil {
		t.Errorf("5 < 2×3 rejected: %v", r)
	}
	if r := c.Admit(Stats{Requests: 6}, 3); r == nil || r.Limit != 6 || r.Kind != "requests" {
		t.Errorf("6 ≥ 2×3 admitted: %v", r)
	}
	s := Synthetic(scoring.Some(0.5), scoring.QueueWSPT)
	if !s.IsSynthetic() || s.Classify("anything", 99) != 0 || !s.Classes[0].Queues() || s.Classes[0].QueuePolicy != scoring.QueueWSPT {
		t.Errorf("synthetic %+v", s)
	}
	if Synthetic(scoring.OptFloat{}, scoring.QueueFCFS).Classes[0].Queues() {
		t.Error("synthetic class without a threshold queues")
	}
}

// FuzzParse: any bytes either fail with ErrInvalid or give profiles whose classification stays inside
// their classes.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: c, policy_family: f, cache_bucket: b, quantum: 1}]\n"))
	f.Add([]byte("models: {m: {default_policy_family: f}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error outside ErrInvalid: %v", err)
			}
			return
		}
		profiles := []*Profile{c.Profile("")}
		for _, m := range c.Models() {
			profiles = append(profiles, c.Profile(m))
		}
		for _, p := range profiles {
			if p == nil {
				continue
			}
			for _, req := range []string{"", "x", p.Classes[0].Name} {
				for _, u := range []int{-1, 0, 1, 1 << 20, 1 << 62} {
					if i := p.Classify(req, u); i < 0 || i >= len(p.Classes) {
						t.Fatalf("Classify(%q, %d) = %d of %d classes", req, u, i, len(p.Classes))
					}
				}
			}
		}
	})
}
