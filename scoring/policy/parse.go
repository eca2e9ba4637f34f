package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/kvroute/kvroute/scoring"
)

// ErrInvalid: the policy document cannot be read, parsed or is not valid.
var ErrInvalid = errors.New("policy: invalid router policy config")

// MaxDocumentBytes bounds the policy document read from disk.
const MaxDocumentBytes = 1 << 20

// Load reads and parses the policy document at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, err)
	}
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrInvalid, path, MaxDocumentBytes)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// The document as written; pointers tell a missing field from a zero one.
type rawDoc struct {
	DefaultPolicyFamily *string                `yaml:"default_policy_family"`
	UncachedISLBuckets  *[]rawBucket           `yaml:"uncached_isl_buckets"`
	PolicyClasses       *[]rawClass            `yaml:"policy_classes"`
	Models              map[string]*rawProfile `yaml:"models"`
	// WorkerSelection is Dynamo's worker-selection plug-in section, which kvroute does not have.
	WorkerSelection *yaml.Node `yaml:"worker_selection"`
}

type rawProfile struct {
	DefaultPolicyFamily *string      `yaml:"default_policy_family"`
	UncachedISLBuckets  *[]rawBucket `yaml:"uncached_isl_buckets"`
	PolicyClasses       *[]rawClass  `yaml:"policy_classes"`
}

type rawBucket struct {
	MinTokens *uint64 `yaml:"min_tokens"`
	Bucket    string  `yaml:"bucket"`
}

type rawClass struct {
	Name                           string   `yaml:"name"`
	PolicyFamily                   *string  `yaml:"policy_family"`
	CacheBucket                    *string  `yaml:"cache_bucket"`
	QueuePolicy                    *string  `yaml:"queue_policy"`
	Quantum                        *uint64  `yaml:"quantum"`
	PrefillBusyThreshold           *uint64  `yaml:"prefill_busy_threshold"`
	PrefillBusyThresholdFrac       *float64 `yaml:"prefill_busy_threshold_frac"`
	BusyWorkerRatio                *float64 `yaml:"busy_worker_ratio"`
	RequestQueueLimitPerWorker     *uint64  `yaml:"request_queue_limit_per_worker"`
	RawISLTokenQueueLimitPerWorker *uint64  `yaml:"raw_isl_token_queue_limit_per_worker"`
	CachedTokenQueueLimitPerWorker *uint64  `yaml:"cached_token_queue_limit_per_worker"`
}

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

// Parse decodes one YAML policy document (unknown fields are errors) and validates it.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawDoc
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, invalidf("empty document")
		}
		return nil, invalidf("parse: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, invalidf("one YAML document expected")
	}
	if raw.WorkerSelection != nil {
		return nil, invalidf("worker_selection is not supported (kvroute selects workers by --router-mode and its cost flags)")
	}
	c := &Config{models: map[string]*Profile{}}
	switch {
	case raw.DefaultPolicyFamily == nil && raw.UncachedISLBuckets == nil && raw.PolicyClasses == nil:
	case raw.DefaultPolicyFamily != nil && raw.UncachedISLBuckets != nil && raw.PolicyClasses != nil:
		p, err := resolveProfile(&rawProfile{raw.DefaultPolicyFamily, raw.UncachedISLBuckets, raw.PolicyClasses}, "root")
		if err != nil {
			return nil, err
		}
		c.root = p
	default:
		return nil, invalidf("root profile must specify default_policy_family, uncached_isl_buckets and policy_classes together, or none of them")
	}
	for name, rp := range raw.Models {
		if name == "" {
			return nil, invalidf("model profile name must not be empty")
		}
		loc := fmt.Sprintf("model %q", name)
		if rp == nil || rp.DefaultPolicyFamily == nil || rp.UncachedISLBuckets == nil || rp.PolicyClasses == nil {
			return nil, invalidf("%s must specify default_policy_family, uncached_isl_buckets and policy_classes", loc)
		}
		p, err := resolveProfile(rp, loc)
		if err != nil {
			return nil, err
		}
		c.models[name] = p
	}
	if c.root == nil && len(c.models) == 0 {
		return nil, invalidf("the document must define a root profile or at least one model profile")
	}
	return c, nil
}

// resolveProfile validates one profile and builds its classification tables.
func resolveProfile(rp *rawProfile, loc string) (*Profile, error) {
	if err := identifier(*rp.DefaultPolicyFamily, "policy family", loc); err != nil {
		return nil, err
	}
	buckets, bucketIdx, bucketNames, err := resolveBuckets(*rp.UncachedISLBuckets, loc)
	if err != nil {
		return nil, err
	}
	raws := *rp.PolicyClasses
	if len(raws) == 0 {
		return nil, invalidf("%s policy_classes must not be empty", loc)
	}
	p := &Profile{buckets: buckets, families: map[string]int{}, explicit: map[string]int{}}
	type binding struct {
		family string
		bucket int
		cell   bool
	}
	bindings := make([]binding, 0, len(raws))
	names := map[string]bool{}
	for i := range raws {
		rc := &raws[i]
		cl, err := resolveClass(rc, loc)
		if err != nil {
			return nil, err
		}
		if names[cl.Name] {
			return nil, invalidf("%s contains duplicate policy class %q", loc, cl.Name)
		}
		names[cl.Name] = true
		var b binding
		switch {
		case rc.PolicyFamily == nil && rc.CacheBucket == nil:
		case rc.PolicyFamily != nil && rc.CacheBucket != nil:
			if err := identifier(*rc.PolicyFamily, "policy family", loc); err != nil {
				return nil, err
			}
			bi, ok := bucketIdx[*rc.CacheBucket]
			if !ok {
				return nil, invalidf("%s policy class %q references unknown cache bucket %q", loc, cl.Name, *rc.CacheBucket)
			}
			b = binding{family: *rc.PolicyFamily, bucket: bi, cell: true}
			if _, ok := p.families[b.family]; !ok {
				p.families[b.family] = len(p.families)
			}
		default:
			return nil, invalidf("%s policy class %q must specify both policy_family and cache_bucket, or neither for an explicit class", loc, cl.Name)
		}
		p.Classes = append(p.Classes, cl)
		bindings = append(bindings, b)
	}
	def, ok := p.families[*rp.DefaultPolicyFamily]
	if !ok {
		return nil, invalidf("%s default_policy_family %q does not name a configured family", loc, *rp.DefaultPolicyFamily)
	}
	p.defaultFamily = def
	p.cells = make([]int, len(p.families)*len(buckets))
	for i := range p.cells {
		p.cells[i] = -1
	}
	for ci, b := range bindings {
		name := p.Classes[ci].Name
		if !b.cell {
			if _, ok := p.families[name]; ok {
				return nil, invalidf("%s explicit policy class %q collides with a policy family", loc, name)
			}
			p.explicit[name] = ci
			continue
		}
		cell := p.families[b.family]*len(buckets) + b.bucket
		if p.cells[cell] >= 0 {
			return nil, invalidf("%s contains duplicate policy classes for family %q and bucket %q", loc, b.family, bucketNames[b.bucket])
		}
		p.cells[cell] = ci
	}
	for fam, f := range p.families {
		for bi, bn := range bucketNames {
			if p.cells[f*len(buckets)+bi] < 0 {
				return nil, invalidf("%s is missing a policy class for family %q and bucket %q", loc, fam, bn)
			}
		}
	}
	return p, nil
}

func resolveBuckets(raws []rawBucket, loc string) (mins []uint64, idx map[string]int, names []string, err error) {
	if len(raws) == 0 {
		return nil, nil, nil, invalidf("%s uncached_isl_buckets must not be empty", loc)
	}
	idx = map[string]int{}
	for i, rb := range raws {
		if err := identifier(rb.Bucket, "cache bucket", loc); err != nil {
			return nil, nil, nil, err
		}
		if rb.MinTokens == nil {
			return nil, nil, nil, invalidf("%s cache bucket %q needs min_tokens", loc, rb.Bucket)
		}
		switch {
		case i == 0 && *rb.MinTokens != 0:
			return nil, nil, nil, invalidf("%s uncached_isl_buckets must start at min_tokens 0", loc)
		case i > 0 && *rb.MinTokens <= mins[i-1]:
			return nil, nil, nil, invalidf("%s uncached_isl_buckets min_tokens must be strictly increasing", loc)
		}
		if _, dup := idx[rb.Bucket]; dup {
			return nil, nil, nil, invalidf("%s contains duplicate cache bucket %q", loc, rb.Bucket)
		}
		idx[rb.Bucket] = i
		mins = append(mins, *rb.MinTokens)
		names = append(names, rb.Bucket)
	}
	return mins, idx, names, nil
}

func resolveClass(rc *rawClass, loc string) (Class, error) {
	if err := identifier(rc.Name, "policy class", loc); err != nil {
		return Class{}, err
	}
	cl := Class{Name: rc.Name, QueuePolicy: scoring.QueueFCFS,
		PrefillBusyThreshold: optOf(rc.PrefillBusyThreshold), RequestLimitPerWorker: optOf(rc.RequestQueueLimitPerWorker),
		RawISLTokenLimitPerWorker: optOf(rc.RawISLTokenQueueLimitPerWorker), CachedTokenLimitPerWorker: optOf(rc.CachedTokenQueueLimitPerWorker)}
	if rc.QueuePolicy != nil {
		// lcfs (an experiment of the --router-queue-policy flag) is refused here, as Dynamo refuses it.
		switch qp := scoring.QueuePolicy(*rc.QueuePolicy); qp {
		case scoring.QueueFCFS, scoring.QueueWSPT:
			cl.QueuePolicy = qp
		default:
			return Class{}, invalidf("%s policy class %q queue_policy %q must be fcfs or wspt", loc, rc.Name, *rc.QueuePolicy)
		}
	}
	if rc.Quantum == nil {
		return Class{}, invalidf("%s policy class %q needs a quantum", loc, rc.Name)
	}
	if *rc.Quantum == 0 {
		return Class{}, invalidf("%s policy class %q quantum must be greater than zero", loc, rc.Name)
	}
	cl.Quantum = *rc.Quantum
	if v := rc.PrefillBusyThresholdFrac; v != nil {
		if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 {
			return Class{}, invalidf("%s policy class %q prefill_busy_threshold_frac must be finite and non-negative", loc, rc.Name)
		}
		cl.PrefillBusyThresholdFrac = scoring.Some(*v)
	}
	if v := rc.BusyWorkerRatio; v != nil {
		// A share of the workers, not a multiple of a token budget: 16 would never trigger.
		if math.IsNaN(*v) || math.IsInf(*v, 0) || *v <= 0 || *v > 1 {
			return Class{}, invalidf("%s policy class %q busy_worker_ratio must be a finite fraction in (0, 1]", loc, rc.Name)
		}
		if !cl.Queues() {
			return Class{}, invalidf("%s policy class %q sets busy_worker_ratio but no prefill_busy_threshold or prefill_busy_threshold_frac, so no worker can ever be busy", loc, rc.Name)
		}
		cl.BusyWorkerRatio = scoring.Some(*v)
	}
	return cl, nil
}

// identifier checks a name against [A-Za-z0-9_.-]+.
func identifier(name, kind, loc string) error {
	ok := name != ""
	for i := 0; i < len(name) && ok; i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return invalidf("%s %s name %q must match [A-Za-z0-9_.-]+", loc, kind, name)
	}
	return nil
}
