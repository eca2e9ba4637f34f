package k8spool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/registry"
)

// Pod annotations that override the conventions.
const (
	// AnnotationWorkerID is the worker id (decimal); default: a hash of namespace/name.
	AnnotationWorkerID = "kvroute.io/worker-id"
	// AnnotationPort is the model server's HTTP port; default: the pool's targetPorts[0].number.
	AnnotationPort = "kvroute.io/model-server-port"
	// AnnotationEventsPort is the KV event (ZMQ PUB) port; default Config.EventsPort; "0" turns events
	// off for the pod (it is routed on load only).
	AnnotationEventsPort = "kvroute.io/kv-events-port"
	// AnnotationReplayPort is the KV event replay (ROUTER) port; default Config.ReplayPort (0: none).
	AnnotationReplayPort = "kvroute.io/kv-replay-port"
	// AnnotationDPSize is the engine's data-parallel size (rank r publishes on the events port + r).
	AnnotationDPSize = "kvroute.io/dp-size"
)

// ErrBadConfig is the class of every Config error.
var ErrBadConfig = errors.New("k8spool: bad config")

// Config names the pool and the conventions for its pods.
type Config struct {
	// Namespace and Name of the InferencePool (required).
	Namespace, Name string
	// Resource is the InferencePool's API resource. Default inference.networking.k8s.io/v1 inferencepools.
	Resource schema.GroupVersionResource
	// EventsPort is the pods' KV event port (vLLM's --kv-events-config endpoint). Default 5557.
	EventsPort int
	// ReplayPort is the pods' replay port; 0 (default): no gap recovery.
	ReplayPort int
	// Resync is the informers' resync period. Default 10 minutes.
	Resync time.Duration
}

// DefaultResource is the InferencePool resource of the Gateway API Inference Extension's v1 API.
var DefaultResource = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// PodsResource is the core API's pods, which the watcher reads through the dynamic client like the pool.
var PodsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// DefaultConfig returns the conventions: v1 InferencePool, events on 5557, no replay.
func DefaultConfig() Config {
	return Config{Resource: DefaultResource, EventsPort: 5557, Resync: 10 * time.Minute}
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Namespace == "" || c.Name == "":
		return fmt.Errorf("%w: the pool's namespace and name are required", ErrBadConfig)
	case c.Resource.Resource == "" || c.Resource.Version == "":
		return fmt.Errorf("%w: the pool's API resource is required", ErrBadConfig)
	case c.EventsPort < 0 || c.EventsPort > 65535 || c.ReplayPort < 0 || c.ReplayPort > 65535:
		return fmt.Errorf("%w: ports must be 0 to 65535", ErrBadConfig)
	}
	return nil
}

// WorkerSet is what the watcher drives: *router.Router satisfies it.
type WorkerSet interface {
	AddWorker(registry.Spec) error
	RemoveWorker(id uint64) error
}

// Pool is the pool's spec as the watcher reads it.
type Pool struct {
	Selector    labels.Selector
	TargetPort  int
	FailureMode string // FailOpen or FailClose (the default)
}

// Watcher keeps a WorkerSet equal to the pool's ready pods. Informer callbacks only signal; one
// goroutine (Run) reads the informers' stores and adds or removes workers, so the set is written by one
// owner.
type Watcher struct {
	cfg    Config
	set    WorkerSet
	pods   cache.SharedIndexInformer
	pool   cache.SharedIndexInformer
	kick   chan struct{}
	onMode func(string)

	mu      sync.Mutex // guards current for Workers (readers outside Run)
	current map[string]registry.Spec
	synced  atomic.Bool
	added   atomic.Uint64
	removed atomic.Uint64
	errs    atomic.Uint64
}

// NewWatcher watches the pool cfg names and the pods of its namespace through dc. onFailureMode, when
// set, gets the pool's spec.endpointPickerRef.failureMode whenever the pool changes.
func NewWatcher(dc dynamic.Interface, set WorkerSet, cfg Config, onFailureMode func(string)) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, set: set, kick: make(chan struct{}, 1), onMode: onFailureMode, current: map[string]registry.Spec{}}
	w.pods = newInformer(dc, PodsResource, cfg)
	if err := w.pods.SetTransform(trimPod); err != nil {
		return nil, err
	}
	w.pool = newInformer(dc, cfg.Resource, cfg)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.signal() },
		UpdateFunc: func(any, any) { w.signal() },
		DeleteFunc: func(any) { w.signal() },
	}
	if _, err := w.pods.AddEventHandler(h); err != nil {
		return nil, err
	}
	if _, err := w.pool.AddEventHandler(h); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Watcher) signal() {
	select {
	case w.kick <- struct{}{}:
	default: // a reconcile is pending already; it will see this change
	}
}

// newInformer is an informer of resource r in the pool's namespace, its objects unstructured.
func newInformer(dc dynamic.Interface, r schema.GroupVersionResource, cfg Config) cache.SharedIndexInformer {
	ri := dc.Resource(r).Namespace(cfg.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, dc), &unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ResyncPeriod: cfg.Resync, ObjectDescription: r.String()})
}

var informerLoop = routine.Named("k8spool.informer")

// Run starts the informers and reconciles until ctx ends; it returns once the informers have stopped.
func (w *Watcher) Run(ctx context.Context) {
	var g routine.Group
	defer g.Wait()
	g.Go(informerLoop, func() { w.pods.RunWithContext(ctx) })
	g.Go(informerLoop, func() { w.pool.RunWithContext(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), w.pods.HasSynced, w.pool.HasSynced) {
		return
	}
	w.reconcile()
	w.synced.Store(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			w.reconcile()
		}
	}
}

// Synced reports whether the first full reconcile after the informers' sync is done (readiness).
func (w *Watcher) Synced() bool { return w.synced.Load() }

// Stats are the watcher's counters.
type Stats struct{ Added, Removed, Errors uint64 }

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Added: w.added.Load(), Removed: w.removed.Load(), Errors: w.errs.Load()}
}

// Workers returns the workers the watcher registered, by worker id.
func (w *Watcher) Workers() []registry.Spec {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]registry.Spec, 0, len(w.current))
	for _, s := range w.current {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// reconcile makes the set equal to the pool's ready pods.
func (w *Watcher) reconcile() {
	pool, ok := w.readPool()
	want := map[string]registry.Spec{}
	if ok {
		if w.onMode != nil {
			w.onMode(pool.FailureMode)
		}
		for _, o := range w.pods.GetStore().List() {
			u, isPod := o.(*unstructured.Unstructured)
			if !isPod {
				continue
			}
			pod := ReadPod(u.Object)
			if !pool.Selector.Matches(labels.Set(pod.Labels)) {
				continue
			}
			if sp, ok := w.specOf(pod, pool); ok {
				want[pod.Namespace+"/"+pod.Name] = sp
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, sp := range w.current {
		if nw, ok := want[key]; ok && nw == sp {
			continue
		}
		if err := w.set.RemoveWorker(sp.ID); err != nil {
			w.errs.Add(1)
		}
		w.removed.Add(1)
		delete(w.current, key)
	}
	for key, sp := range want {
		if _, ok := w.current[key]; ok {
			continue
		}
		if err := w.set.AddWorker(sp); err != nil {
			w.errs.Add(1)
			continue // a bad annotation or an id clash: retried at the next change or resync
		}
		w.added.Add(1)
		w.current[key] = sp
	}
}

// readPool reads the InferencePool's selector, target port and failure mode; false when the pool does
// not exist or is malformed (no pods are then routable).
func (w *Watcher) readPool() (Pool, bool) {
	o, exists, err := w.pool.GetStore().GetByKey(w.cfg.Namespace + "/" + w.cfg.Name)
	if err != nil || !exists {
		return Pool{}, false
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return Pool{}, false
	}
	return ParsePool(u.Object)
}

// ParsePool reads the fields the picker needs from an InferencePool object: spec.selector.matchLabels
// (v1; a plain label map as in v1alpha2 is accepted too), spec.targetPorts[0].number (v1) or
// spec.targetPortNumber (v1alpha2), spec.endpointPickerRef.failureMode (v1) or
// spec.extensionRef.failureMode (v1alpha2).
func ParsePool(obj map[string]any) (Pool, bool) {
	sel, found, _ := unstructured.NestedStringMap(obj, "spec", "selector", "matchLabels")
	if !found {
		sel, found, _ = unstructured.NestedStringMap(obj, "spec", "selector")
	}
	if !found || len(sel) == 0 {
		return Pool{}, false
	}
	p := Pool{Selector: labels.SelectorFromSet(sel), FailureMode: "FailClose"}
	if ports, ok, _ := unstructured.NestedSlice(obj, "spec", "targetPorts"); ok && len(ports) > 0 {
		if m, ok := ports[0].(map[string]any); ok {
			n, _, _ := unstructured.NestedInt64(m, "number")
			p.TargetPort = int(n)
		}
	}
	if p.TargetPort == 0 {
		n, _, _ := unstructured.NestedInt64(obj, "spec", "targetPortNumber")
		p.TargetPort = int(n)
	}
	for _, ref := range []string{"endpointPickerRef", "extensionRef"} {
		if m, ok, _ := unstructured.NestedString(obj, "spec", ref, "failureMode"); ok && m != "" {
			p.FailureMode = m
			break
		}
	}
	return p, p.TargetPort > 0 && p.TargetPort < 65536
}

// specOf describes a ready pod as a worker; false for pods that are not ready, are leaving, or have no
// IP address (or something else in status.podIP).
func (w *Watcher) specOf(pod Pod, pool Pool) (registry.Spec, bool) {
	if pod.Leaving || pod.Phase != "Running" || !pod.Ready {
		return registry.Spec{}, false
	}
	if ip, err := netip.ParseAddr(pod.IP); err != nil || ip.Zone() != "" {
		return registry.Spec{}, false
	}
	ann := pod.Annotations
	id := xxh3.HashString(pod.Namespace+"/"+pod.Name) & (1<<53 - 1) // exact in JSON numbers
	if v, ok := ann[AnnotationWorkerID]; ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return registry.Spec{}, false
		}
		id = n
	}
	port := pool.TargetPort
	if n, ok := annInt(ann, AnnotationPort); ok {
		port = n
	}
	events, replay := w.cfg.EventsPort, w.cfg.ReplayPort
	if n, ok := annInt(ann, AnnotationEventsPort); ok {
		events = n
	}
	if n, ok := annInt(ann, AnnotationReplayPort); ok {
		replay = n
	}
	sp := registry.Spec{ID: id, URL: "http://" + net.JoinHostPort(pod.IP, strconv.Itoa(port))}
	if events > 0 {
		sp.Events = "tcp://" + net.JoinHostPort(pod.IP, strconv.Itoa(events))
		if replay > 0 {
			sp.Replay = "tcp://" + net.JoinHostPort(pod.IP, strconv.Itoa(replay))
		}
	}
	if n, ok := annInt(ann, AnnotationDPSize); ok && n > 1 {
		sp.DPSize = n
	}
	if sp.Validate() != nil {
		return registry.Spec{}, false
	}
	return sp, true
}

func annInt(ann map[string]string, key string) (int, bool) {
	v, ok := ann[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 {
		return 0, false
	}
	return n, true
}
