package router

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/workers/registry"
)

const routerPolicyDoc = `
default_policy_family: chat
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: chat, policy_family: chat, cache_bucket: all, quantum: 8, prefill_busy_threshold: 0, request_queue_limit_per_worker: 0}
models:
  small:
    default_policy_family: f
    uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
    policy_classes:
      - {name: small-a, policy_family: f, cache_bucket: all, quantum: 1}
      - {name: small-b, quantum: 1}
`

func classNames(r *Router) string {
	var names []string
	for _, c := range r.QueueClasses() {
		names = append(names, c.Class)
	}
	return strings.Join(names, ",")
}

// TestPolicyConfigAtStartup: New reads --router-policy-config once; a bad document stops the router with
// the reason; the model picks its profile (else the root); without a document there is one class.
func TestPolicyConfigAtStartup(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(routerPolicyDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(routerPolicyDoc, "quantum: 8", "quantum: 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	t.Cleanup(system.Shutdown)
	tests := []struct {
		name, path, model, want, err string
	}{
		{"none", "", "", "default", ""},
		{"root", good, "", "chat", ""},
		{"other model", good, "big", "chat", ""},
		{"model profile", good, "small", "small-a,small-b", ""},
		{"invalid", bad, "", "", "quantum must be greater than zero"},
		{"missing", filepath.Join(dir, "nope.yaml"), "", "", "nope.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(4)
			cfg.Scoring.PolicyConfig, cfg.Model = tc.path, tc.model
			r, err := New(system, cfg)
			if tc.err != "" {
				if err == nil || !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), tc.err) ||
					!strings.Contains(err.Error(), "--router-policy-config") {
					t.Fatalf("error %v, want one naming the flag and %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			if got := classNames(r); got != tc.want {
				t.Fatalf("classes %s, want %s", got, tc.want)
			}
		})
	}
}

// TestQueueRejectionCounted: a request its class rejects gets ErrQueueRejected and is counted by class
// and limit.
func TestQueueRejectionCounted(t *testing.T) {
	pc, err := policy.Parse([]byte(routerPolicyDoc))
	if err != nil {
		t.Fatal(err)
	}
	system := actors.NewSystem(nil)
	t.Cleanup(system.Shutdown)
	cfg := DefaultConfig(4)
	cfg.Policy = pc
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.AddWorker(registry.Spec{ID: 1, URL: "http://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Route(ctx, &RouteRequest{ID: "a", Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Route(ctx, &RouteRequest{ID: "b", Tokens: []uint32{9, 10, 11, 12}})
	if !errors.Is(err, ErrQueueRejected) {
		t.Fatalf("busy worker, limit 0: %v", err)
	}
	var m dto.Metric
	if err := r.Metrics.rejected.WithLabelValues("chat", "requests").Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 1 {
		t.Fatalf("rejections counted %v, want 1", n)
	}
}
