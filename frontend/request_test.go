package frontend

import (
	"context"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/actors"
	"github.com/kvroute/kvroute/frontend/openai"
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

// peekMap is a header source for readHeaders.
type peekMap map[string]string

func (p peekMap) Peek(key string) []byte {
	if v, ok := p[key]; ok {
		return []byte(v)
	}
	return nil
}

// TestPriorityHeaderBounded: x-dynamo-request-priority takes the seconds /v1/route takes, [0, a day];
// NaN, infinities and larger jumps are refused with 400 (they reached the queue as the top priority).
// The body's agent_hints.priority is clamped to the same range.
func TestPriorityHeaderBounded(t *testing.T) {
	a := &OpenAIAPI{}
	for _, v := range []string{"0", "2.5", "86400"} {
		var j job
		if err := a.readHeaders(peekMap{"x-dynamo-request-priority": v}, &j); err != nil || j.priority == nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	for _, v := range []string{"NaN", "Inf", "+Inf", "-1", "86401", "1e308", "high"} {
		var j job
		err := a.readHeaders(peekMap{"x-dynamo-request-priority": v}, &j)
		if code, _ := statusOf(err); err == nil || code != 400 {
			t.Errorf("%s: %v, want a 400", v, err)
		}
	}
	huge := 1e308
	c := openai.Common{NVExt: &openai.NVExt{AgentHints: &openai.AgentHints{Priority: &huge}}}
	if got := c.PriorityJump(); got != openai.MaxPriorityJump {
		t.Errorf("body priority 1e308 → %v", got)
	}
}
