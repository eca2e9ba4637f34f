package frontend

import (
	"runtime"
	"testing"
	"weak"
)

// TestIdleActorKeepsNoRequest: a request actor back on the idle list (requestActors keeps up to 256 for
// reuse) holds nothing of the request it answered. Before, it kept the request's job (its body, the
// parsed request, the tokens, the worker-bound body) until its next request, so after a burst the idle
// actors held the peak's memory: 1.1 GB live after 8 concurrent 29 MB image requests had ended.
func TestIdleActorKeepsNoRequest(t *testing.T) {
	s := startStack(t, stackOpts{workers: 1, speedup: 100, mm: true})
	// A request the media screen refuses: it goes through an actor and nothing is routed or charged.
	body := []byte(`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":[` +
		`{"type":"image_url","image_url":{"url":"http://169.254.169.254/x.png"}}]}]}`)
	j, err := s.api.parse(headerMap{}, body, epChat, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.api.runRequestActor(j); p.err == nil {
		t.Fatal("the media screen let a link-local URL through")
	}
	j.cancel()
	held := weak.Make(j)
	j = nil
	runtime.GC()
	runtime.GC()
	if held.Value() != nil {
		t.Fatal("an idle request actor still holds the request it answered")
	}
}

// headerMap is a request without headers, for parse.
type headerMap struct{}

func (headerMap) Peek(string) []byte { return nil }
