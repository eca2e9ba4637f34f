package natsplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/workers/registry"
)

// DiscoveryConfig configures worker discovery in a JetStream key-value bucket (--discovery nats).
type DiscoveryConfig struct {
	// TTL is how long a registration lives without a heartbeat; it is the bucket's MaxAge and the
	// watchers' expiry. Default 10s.
	TTL time.Duration
	// Heartbeat is how often a registrar re-puts its entry. Default TTL/3.
	Heartbeat time.Duration
	// Replicas of the bucket. Default 1.
	Replicas int
	// Clock is the watcher's clock for expiry; nil means the wall clock. Entries carry the server's put
	// time, so frontends and NATS servers must roughly agree on the time (well within TTL).
	Clock clock.Clock
}

func (c DiscoveryConfig) withDefaults() DiscoveryConfig {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.TTL {
		c.Heartbeat = c.TTL / 3
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// EnsureDiscoveryBucket creates or updates the workers bucket: entries age out after TTL, and the
// server writes a delete marker when one does (so watchers see the expiry), where it supports markers.
func EnsureDiscoveryBucket(ctx context.Context, js jetstream.JetStream, cfg DiscoveryConfig) (jetstream.KeyValue, error) {
	cfg = cfg.withDefaults()
	kc := jetstream.KeyValueConfig{Bucket: DiscoveryBucket, TTL: cfg.TTL, Replicas: cfg.Replicas, LimitMarkerTTL: cfg.TTL}
	kv, err := js.CreateOrUpdateKeyValue(ctx, kc)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		kc.LimitMarkerTTL = 0
		kv, err = js.CreateOrUpdateKeyValue(ctx, kc)
	}
	if err != nil {
		return nil, fmt.Errorf("natsplane: bucket %s: %w", DiscoveryBucket, err)
	}
	return kv, nil
}

// Register keeps spec registered until ctx is done: it puts the entry every Heartbeat (retrying through
// NATS outages) and deletes it on the way out when deregister is true (a graceful stop; a crash leaves
// the entry to expire after TTL). The simulator with --nats-url and `kvroute relay --discovery nats`
// call it.
func Register(ctx context.Context, nc *nats.Conn, spec registry.Spec, cfg DiscoveryConfig, deregister bool) error {
	cfg = cfg.withDefaults()
	if err := spec.Validate(); err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	val, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	key := strconv.FormatUint(spec.ID, 10)
	var kv jetstream.KeyValue
	t := time.NewTicker(cfg.Heartbeat)
	defer t.Stop()
	for {
		if kv == nil {
			cctx, cancel := context.WithTimeout(ctx, cfg.Heartbeat)
			kv, _ = EnsureDiscoveryBucket(cctx, js, cfg)
			cancel()
		}
		if kv != nil {
			cctx, cancel := context.WithTimeout(ctx, cfg.Heartbeat)
			_, _ = kv.Put(cctx, key, val)
			cancel()
		}
		select {
		case <-ctx.Done():
			if deregister && kv != nil {
				dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = kv.Delete(dctx, key)
				cancel()
			}
			return nil
		case <-t.C:
		}
	}
}

// WorkerSet is what discovery drives: *router.Router satisfies it.
type WorkerSet interface {
	AddWorker(registry.Spec) error
	RemoveWorker(id uint64) error
	// Has reports whether worker id is in the set: a worker removed from it by another hand (the admin
	// API's DELETE) while its record still heartbeats is added again at its next heartbeat.
	Has(id uint64) bool
}

// WatcherStats are a watcher's counters.
type WatcherStats struct {
	Added, Removed, Expired, BadEntries, Errors uint64
}

// Watcher adds and removes workers as their registrations appear, change, get deleted or expire. Run owns
// all of its state (one goroutine); the SetOnRemove callback, when set, is called after a removal (the
// event source's Forget).
type Watcher struct {
	cfg      DiscoveryConfig
	nc       *nats.Conn
	set      WorkerSet
	onRemove atomic.Pointer[func(id uint64)]

	ready     chan struct{}
	readyOnce sync.Once

	added, removed, expired, bad, errs atomic.Uint64
}

// NewWatcher prepares a watcher of the workers bucket that drives set.
func NewWatcher(nc *nats.Conn, set WorkerSet, cfg DiscoveryConfig) *Watcher {
	return &Watcher{cfg: cfg.withDefaults(), nc: nc, set: set, ready: make(chan struct{})}
}

// SetOnRemove sets the callback run after each removal; safe while Run runs.
func (w *Watcher) SetOnRemove(fn func(id uint64)) { w.onRemove.Store(&fn) }

// Ready is closed once the workers registered when Run started have been added (or Run failed), so a
// frontend can start its event source after them and drop no event of a known worker.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

func (w *Watcher) markReady() { w.readyOnce.Do(func() { close(w.ready) }) }

// Stats returns the counters.
func (w *Watcher) Stats() WatcherStats {
	return WatcherStats{Added: w.added.Load(), Removed: w.removed.Load(), Expired: w.expired.Load(), BadEntries: w.bad.Load(), Errors: w.errs.Load()}
}

type known struct {
	spec registry.Spec
	seen time.Time
}

// Run watches until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.markReady()
	js, err := jetstream.New(w.nc)
	if err != nil {
		return err
	}
	kv, err := EnsureDiscoveryBucket(ctx, js, w.cfg)
	if err != nil {
		return err
	}
	watch, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("natsplane: watch %s: %w", DiscoveryBucket, err)
	}
	defer watch.Stop()
	cur := map[uint64]*known{}
	tick := time.NewTicker(w.cfg.TTL / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			now := w.cfg.Clock.Now()
			for id, k := range cur {
				if now.Sub(k.seen) > w.cfg.TTL {
					w.expired.Add(1)
					w.remove(cur, id)
				}
			}
		case e, ok := <-watch.Updates():
			if !ok {
				return errors.New("natsplane: discovery watch closed")
			}
			if e == nil {
				w.markReady() // initial values delivered
				continue
			}
			w.apply(cur, e)
		}
	}
}

// apply applies one bucket entry to the workers known (cur): a put adds its worker (or refreshes it,
// or replaces it when its spec changed), a delete or purge removes it; a malformed entry is counted.
// Any NATS client allowed to write the bucket can put an entry, so a record is read as the admin API
// reads a registration: registry.ParseJSON (unknown fields refused), an api_key_env only under
// registry.RemoteKeyEnvPrefix (the frontend sends the key to the record's URL), and the key must be the
// id's canonical decimal (Register's; "07" would be a second entry for worker 7, whose delete removed
// the worker the other still registers).
func (w *Watcher) apply(cur map[uint64]*known, e jetstream.KeyValueEntry) {
	id, err := strconv.ParseUint(e.Key(), 10, 64)
	if err != nil || strconv.FormatUint(id, 10) != e.Key() {
		w.bad.Add(1)
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		if _, ok := cur[id]; ok {
			w.remove(cur, id)
		}
		return
	}
	spec, err := registry.ParseJSON(e.Value())
	if err != nil || spec.ID != id || spec.APIKeyEnv != "" && !strings.HasPrefix(spec.APIKeyEnv, registry.RemoteKeyEnvPrefix) {
		w.bad.Add(1)
		return
	}
	if k, ok := cur[id]; ok {
		if k.spec == spec {
			k.seen = e.Created()
			if !w.set.Has(id) {
				// Removed by another hand while its record lives on: the record is the registration.
				if err := w.set.AddWorker(spec); err != nil {
					w.errs.Add(1)
					return
				}
				w.added.Add(1)
			}
			return
		}
		w.remove(cur, id) // the worker came back with another spec
	}
	if e.Created().Add(w.cfg.TTL).Before(w.cfg.Clock.Now()) {
		return // a stale entry the bucket has not aged out yet
	}
	if err := w.set.AddWorker(spec); err != nil {
		w.errs.Add(1)
		return
	}
	w.added.Add(1)
	cur[id] = &known{spec: spec, seen: e.Created()}
}

// remove forgets worker id and removes it from the set, telling OnRemove.
func (w *Watcher) remove(cur map[uint64]*known, id uint64) {
	delete(cur, id)
	if err := w.set.RemoveWorker(id); err != nil {
		w.errs.Add(1)
		return
	}
	w.removed.Add(1)
	if fn := w.onRemove.Load(); fn != nil {
		(*fn)(id)
	}
}
