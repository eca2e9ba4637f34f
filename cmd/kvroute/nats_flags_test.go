package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/actors/router"
	"github.com/kvroute/kvroute/workers/natsplane"
)

// --nats-url points the frontend at an outside NATS server, and --router-reset-states (with durable
// events) purges that server's KV event stream and deletes the index snapshot at startup.
func TestNATSURLAndResetStates(t *testing.T) {
	srv, err := natsplane.StartServer(natsplane.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := natsplane.EnsureEventStream(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, natsplane.EventSubject(7), []byte("left over from an earlier run")); err != nil {
		t.Fatal(err)
	}
	obj, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: natsplane.SnapshotBucket})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, "snapshot", []byte("stale")); err != nil {
		t.Fatal(err)
	}
	clients := srv.NumClients()

	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("frontend", []string{"--nats-url", srv.ClientURL(), "--event-plane", "nats",
		"--durable-kv-events", "--router-reset-states"}, nil)
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	rcfg := router.DefaultConfig(16)
	rcfg.TickInterval = -1
	r, err := f.nats.newRouter(actor.NewActorSystem(), rcfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	defer f.nats.stop()
	if srv.NumClients() <= clients {
		t.Fatalf("--nats-url: no new client on %s (%d before, %d after)", srv.ClientURL(), clients, srv.NumClients())
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("--router-reset-states: %s still holds %d messages", natsplane.EventStream, info.State.Msgs)
	}
	// The durable source may create the bucket again at startup; the stale snapshot must be gone.
	if o, err := js.ObjectStore(ctx, natsplane.SnapshotBucket); err == nil {
		if _, err := o.GetInfo(ctx, "snapshot"); !errors.Is(err, jetstream.ErrObjectNotFound) {
			t.Fatalf("--router-reset-states: the stale snapshot is still in %s (%v)", natsplane.SnapshotBucket, err)
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatal(err)
	}
}
