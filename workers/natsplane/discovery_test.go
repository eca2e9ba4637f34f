package natsplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestDiscovery: on a single embedded node (--nats-embedded), registered workers appear at a frontend,
// a gracefully stopped one leaves at once, a crashed one (heartbeats stop) leaves after the TTL, and a
// returning one is added again.
func TestDiscovery(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	url := s.ClientURL()
	cfg := DiscoveryConfig{TTL: time.Second, Heartbeat: 200 * time.Millisecond}

	r, err := router.New(actors.NewSystem(nil), func() router.Config { c := router.DefaultConfig(testBlockSize); c.TickInterval = -1; return c }())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	w := NewWatcher(connect(t, url), r, cfg)
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-wdone })

	register := func(id uint64, deregister bool) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		spec := registry.Spec{ID: id, URL: fmt.Sprintf("http://127.0.0.1:%d", 9000+id), BlockSize: testBlockSize}
		go func() { defer close(done); _ = Register(ctx, connect(t, url), spec, cfg, deregister) }()
		return func() { cancel(); <-done }
	}
	workers := func(want ...uint64) func() string {
		return func() string {
			st := r.Workers()
			if len(st) != len(want) {
				return fmt.Sprintf("%d workers, want %v (%+v)", len(st), want, w.Stats())
			}
			for i, s := range st {
				if s.ID != want[i] {
					return fmt.Sprintf("worker %d, want %v", s.ID, want)
				}
			}
			return ""
		}
	}
	stop1 := register(1, false)
	stop2 := register(2, true)
	testutil.Until(t, 5*time.Second, "both registered", workers(1, 2))
	stop2()
	testutil.Until(t, 500*time.Millisecond, "graceful stop removes at once", workers(1))
	stop1() // crash: no delete, the entry expires
	start := time.Now()
	testutil.Until(t, 5*time.Second, "crashed worker expires", workers())
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("crashed worker removed after %v, before its TTL", d)
	}
	stop1 = register(1, true)
	defer stop1()
	testutil.Until(t, 5*time.Second, "returning worker added", workers(1))
	// Removed by another hand (the admin API's DELETE) while it still heartbeats: its record brings it
	// back at its next heartbeat (it stayed out until the frontend restarted).
	if err := r.RemoveWorker(1); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "a removed worker that still heartbeats added again", workers(1))
	t.Logf("watcher: %+v", w.Stats())
}

// Anyone allowed to write the workers bucket can put a record there, so the watcher reads records as the
// admin API reads registrations: a record with an api_key_env outside registry.RemoteKeyEnvPrefix (the
// frontend would send $HOME's value, or a cloud credential's, to the record's URL), an unknown field or
// a key other than its id's canonical decimal is counted as bad and adds nothing, and a delete under a
// non-canonical key removes nothing. A well-formed record is still added.
func TestDiscoveryRefusesRecords(t *testing.T) {
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	cfg := DiscoveryConfig{TTL: 10 * time.Second}
	r, err := router.New(actors.NewSystem(nil), func() router.Config { c := router.DefaultConfig(testBlockSize); c.TickInterval = -1; return c }())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	w := NewWatcher(connect(t, s.ClientURL()), r, cfg)
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-wdone })
	<-w.Ready()

	js, err := jetstream.New(connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := EnsureDiscoveryBucket(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, val string) {
		if _, err := kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatal(err)
		}
	}
	put("5", `{"id":5,"url":"http://127.0.0.1:9005","block_size":16,"api_key_env":"HOME"}`)
	put("6", `{"id":6,"url":"http://127.0.0.1:9006","block_size":16,"blok_size":16}`)
	put("07", `{"id":7,"url":"http://127.0.0.1:9007","block_size":16}`)
	testutil.Until(t, 5*time.Second, "three bad records counted", func() string {
		if st := w.Stats(); st.BadEntries != 3 || st.Added != 0 {
			return fmt.Sprintf("%+v", st)
		}
		return ""
	})
	t.Setenv("KVROUTE_WORKER_KEY_7", "sk-7")
	put("7", `{"id":7,"url":"http://127.0.0.1:9007","block_size":16,"api_key_env":"KVROUTE_WORKER_KEY_7"}`)
	if err := kv.Delete(ctx, "07"); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 5*time.Second, "the good record added, the stray delete ignored", func() string {
		st, ws := w.Stats(), r.Workers()
		if st.Added != 1 || st.BadEntries != 4 || st.Removed != 0 || len(ws) != 1 || ws[0].ID != 7 {
			return fmt.Sprintf("%+v, %d workers", st, len(ws))
		}
		return ""
	})
}
