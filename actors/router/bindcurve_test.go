package router

import (
	"errors"
	"testing"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/kvevents"
	"github.com/kvroute/kvroute/workers/registry"
)

// A bind-mode worker spec that names a CURVE key is refused (the shared bound socket cannot
// authenticate it), so a plain publisher on that topic is never indexed: its messages reach the bound
// socket and are dropped as an unknown topic.
func TestBindModeRefusesCurveSpec(t *testing.T) {
	system := actors.NewSystem(nil)
	cfg := DefaultConfig(4)
	cfg.Worker.BindEndpoints = []string{"tcp://127.0.0.1:*"}
	r, err := New(system, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { r.Stop(); system.Shutdown() }()
	key, _, err := kvevents.NewCurveKeypair()
	if err != nil {
		t.Fatal(err)
	}
	topic := kvevents.VLLMTopic("127.0.0.1:8101", "m")
	pp := startTopicPub(t, r.Fleet.BindAddr(), topic)
	err = r.AddWorker(registry.Spec{ID: 20, Topic: topic, CurveKey: key})
	if !errors.Is(err, registry.ErrBadSpec) {
		t.Fatalf("bind-mode spec with curve_key: %v, want ErrBadSpec", err)
	}
	a := []uint32{3, 3, 3, 3}
	before := r.Fleet.BindStats().UnknownTopics
	testutil.Eventually(t, "the plain publisher's batches reach the bound socket", func() bool {
		pp.publish(t, stored(0, false, []uint64{7}, a))
		return r.Fleet.BindStats().UnknownTopics > before
	})
	if n := overlapOf(r, a, 20); n != 0 {
		t.Fatalf("plain publisher indexed for a keyed spec: overlap %d", n)
	}
	if len(r.Workers()) != 0 {
		t.Fatalf("refused spec registered: %+v", r.Workers())
	}
}
