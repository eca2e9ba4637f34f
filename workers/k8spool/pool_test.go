package k8spool

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/registry"
)

// recordingSet is a WorkerSet that keeps what it was told.
type recordingSet struct {
	mu    sync.Mutex
	specs map[uint64]registry.Spec
}

func (s *recordingSet) AddWorker(sp registry.Spec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.specs[sp.ID]; ok {
		return fmt.Errorf("duplicate worker %d", sp.ID)
	}
	s.specs[sp.ID] = sp
	return nil
}

func (s *recordingSet) RemoveWorker(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.specs[id]; !ok {
		return fmt.Errorf("unknown worker %d", id)
	}
	delete(s.specs, id)
	return nil
}

// urls lists the workers' URLs, sorted.
func (s *recordingSet) urls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sp := range s.specs {
		out = append(out, sp.URL)
	}
	sort.Strings(out)
	return out
}

func (s *recordingSet) get(id uint64) (registry.Spec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.specs[id]
	return sp, ok
}

// pod is a running pod of namespace llm as the API server serves it, with its spec and the metadata the
// watcher does not read (which its informer's transform drops).
func pod(name, ip string, lbl map[string]string, ready bool, ann map[string]string) *unstructured.Unstructured {
	st := "False"
	if ready {
		st = "True"
	}
	meta := map[string]any{"name": name, "namespace": "llm", "uid": "uid-" + name,
		"managedFields": []any{map[string]any{"manager": "kubelet", "operation": "Update"}}}
	if lbl != nil {
		meta["labels"] = stringMap(lbl)
	}
	if ann != nil {
		meta["annotations"] = stringMap(ann)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "vllm", "image": "vllm/vllm-openai"}}},
		"status": map[string]any{"phase": "Running", "podIP": ip, "conditions": []any{
			map[string]any{"type": "PodScheduled", "status": "True"},
			map[string]any{"type": "Ready", "status": st, "lastTransitionTime": "2026-12-07T00:00:00Z"},
		}},
	}}
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// fakeCluster is client-go's fake dynamic client holding the given pools of resource r and pods.
func fakeCluster(r schema.GroupVersionResource, objs ...runtime.Object) *dynfake.FakeDynamicClient {
	lists := map[schema.GroupVersionResource]string{r: "InferencePoolList", PodsResource: "PodList"}
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, objs...)
}

func inferencePool(port int64, mode string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": "qwen", "namespace": "llm"},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": "vllm"}},
			"targetPorts":       []any{map[string]any{"number": port}},
			"endpointPickerRef": map[string]any{"name": "kvroute-epp", "failureMode": mode},
		},
	}}
}

func eq(a []string, b ...string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestWatcherFollowsThePool drives client-go's fake dynamic client: pods of the pool's selector join the
// candidate set when ready and leave when deleted, unready or relabelled; annotations override the
// ports and the id; the pool's target port and failure mode are followed.
func TestWatcherFollowsThePool(t *testing.T) {
	vllm := map[string]string{"app": "vllm"}
	dc := fakeCluster(DefaultResource, inferencePool(8000, "FailOpen"),
		pod("a", "10.0.0.1", vllm, true, nil),
		pod("b", "10.0.0.2", map[string]string{"app": "other"}, true, nil),
		pod("c", "10.0.0.3", vllm, false, nil),
	)
	set := &recordingSet{specs: map[uint64]registry.Spec{}}
	var modeMu sync.Mutex
	mode := ""
	cfg := DefaultConfig()
	cfg.Namespace, cfg.Name, cfg.ReplayPort = "llm", "qwen", 5558
	w, err := NewWatcher(dc, set, cfg, func(m string) { modeMu.Lock(); mode = m; modeMu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	testutil.Eventually(t, "the ready pod of the pool", func() bool { return w.Synced() && eq(set.urls(), "http://10.0.0.1:8000") })
	sp, _ := set.get(w.Workers()[0].ID)
	if sp.Events != "tcp://10.0.0.1:5557" || sp.Replay != "tcp://10.0.0.1:5558" {
		t.Fatalf("conventions: %+v", sp)
	}
	modeMu.Lock()
	if mode != "FailOpen" {
		t.Fatalf("failure mode %q", mode)
	}
	modeMu.Unlock()

	pods := dc.Resource(PodsResource).Namespace("llm")
	bg := context.Background()
	// A pod with annotations: its id and event port are its own.
	if _, err := pods.Create(bg, pod("d", "10.0.0.4", vllm, true, map[string]string{
		AnnotationWorkerID: "42", AnnotationEventsPort: "6000", AnnotationPort: "8080", AnnotationDPSize: "2"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the annotated pod", func() bool { _, ok := set.get(42); return ok })
	if d, _ := set.get(42); d.URL != "http://10.0.0.4:8080" || d.Events != "tcp://10.0.0.4:6000" || d.DPSize != 2 {
		t.Fatalf("annotated: %+v", d)
	}
	// c becomes ready: it joins; a is deleted: it leaves; d is relabelled out of the pool: it leaves.
	if _, err := pods.UpdateStatus(bg, pod("c", "10.0.0.3", vllm, true, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "c ready", func() bool {
		return eq(set.urls(), "http://10.0.0.1:8000", "http://10.0.0.3:8000", "http://10.0.0.4:8080")
	})
	if err := pods.Delete(bg, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a gone", func() bool { return eq(set.urls(), "http://10.0.0.3:8000", "http://10.0.0.4:8080") })
	if _, err := pods.Update(bg, pod("d", "10.0.0.4", map[string]string{"app": "other"}, true, map[string]string{AnnotationWorkerID: "42"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "d relabelled out", func() bool { return eq(set.urls(), "http://10.0.0.3:8000") })

	// The pool's port and failure mode change: the workers follow.
	pools := dc.Resource(DefaultResource).Namespace("llm")
	if _, err := pools.Update(bg, inferencePool(9000, "FailClose"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the new target port", func() bool { return eq(set.urls(), "http://10.0.0.3:9000") })
	modeMu.Lock()
	if mode != "FailClose" {
		t.Fatalf("failure mode after the update %q", mode)
	}
	modeMu.Unlock()
	// The pool is deleted: no worker is routable.
	if err := pools.Delete(bg, "qwen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the pool gone", func() bool { return len(set.urls()) == 0 })
	if st := w.Stats(); st.Errors != 0 {
		t.Fatalf("errors: %+v", st)
	}
}

func TestParsePoolVersions(t *testing.T) {
	tests := []struct {
		name string
		obj  map[string]any
		port int
		mode string
		ok   bool
	}{
		{"v1", inferencePool(8000, "").Object, 8000, "FailClose", true},
		{"v1alpha2", map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "x"}, "targetPortNumber": int64(8001),
			"extensionRef": map[string]any{"name": "e", "failureMode": "FailOpen"}}}, 8001, "FailOpen", true},
		{"no selector", map[string]any{"spec": map[string]any{"targetPortNumber": int64(8001)}}, 0, "", false},
		{"no port", map[string]any{"spec": map[string]any{"selector": map[string]any{"app": "x"}}}, 0, "FailClose", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := ParsePool(tc.obj)
			if ok != tc.ok || (ok && (p.TargetPort != tc.port || p.FailureMode != tc.mode)) {
				t.Fatalf("got %+v %v", p, ok)
			}
		})
	}
}
