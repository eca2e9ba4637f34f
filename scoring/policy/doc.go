// Package policy is the router's policy classes: the YAML document of --router-policy-config
// (DYN_ROUTER_POLICY_CONFIG), its validation, and the classification of a request into one class.
//
// # Overview
//
// A document has a root profile and optional per-model profiles (a model's profile replaces the root
// wholesale). A profile names the default policy family, the uncached-ISL buckets and the classes. A
// class either fills one cell of the family × bucket matrix, or is explicit (no family, no bucket) and
// is chosen only by its name. Every cell must be filled. Classification (Profile.Classify):
//
//	x-dynamo-meta-policy-class names an explicit class → that class
//	else family = the header's family, or the default → cell (family, bucket of the uncached ISL)
//
// where the uncached ISL is the request's ISL minus the best cached prefix among its eligible workers,
// and its bucket is the last one whose min_tokens ≤ it. Each class carries its queue policy, its DRR
// quantum, its busy rule (prefill tokens above an absolute threshold or a fraction of
// max_num_batched_tokens; the pool is busy when every eligible worker is, or when busy_worker_ratio of
// them are) and per-worker queue limits. Without a document the router has one synthetic class built
// from --router-queue-threshold and --router-queue-policy (Synthetic).
//
// The queues themselves (one heap per class, deficit round robin between classes) live in
// scoring/sched, the scheduler machine; this package is only configuration and pure classification.
//
// # Concurrency model
//
// Parsing is a plain function. A Config and its Profiles are immutable after Parse and safe to share.
//
// # Ownership
//
// The router loads the document once at startup (router.New, from scoring.Config.PolicyConfig) and
// hands the profile of its model to the scheduler machine, which keeps a pointer for its life.
//
// # Data flow
//
//	YAML → Parse (decode with unknown fields denied → validate → resolve) → Config
//	Config.Profile(model) → *Profile → sched.Options.Policy → Classify per queued request
package policy
