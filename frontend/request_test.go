package frontend

import (
	"context"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/actors"
)

// TestRequestActorReusedAfterPanic: a stage that panics answers its request with an internal error, and
// the actor goes back to the idle list and serves the next request.
func TestRequestActorReusedAfterPanic(t *testing.T) {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	a := NewOpenAIAPI(nil, nil, "m", system, nil, OpenAIConfig{}, nil)
	for i := range 3 {
		j := &job{ep: epCompletion, ctx: context.Background()} // no decoded request: tokenize panics
		p := a.runRequestActor(j)
		if p.err == nil || !strings.Contains(p.err.Error(), "internal error while preparing the request") {
			t.Fatalf("request %d: %v", i, p.err)
		}
	}
	a.actors.mu.Lock()
	idle := len(a.actors.idle)
	a.actors.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle request actors, want the one actor reused", idle)
	}
}
