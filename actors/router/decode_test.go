package router

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/workers/registry"
)

// TestFreeOutputTeachesTheDecode: with --router-decode-weight 1, requests ended with FreeOutput (the
// frontend's count of a stream's tokens) reach the kvroute cost's decode fit, one observation each once
// they had a first token; Free, and FreeOutput of a request that streamed one token or none, teach
// nothing. At the default weight 0 nothing is kept.
func TestFreeOutputTeachesTheDecode(t *testing.T) {
	r := newRouter(t, 4)
	cfg := r.Config()
	cfg.DecodeWeight = 1
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := r.AddWorker(registry.Spec{ID: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	end := func(id string, first bool, free func(string) error) {
		t.Helper()
		if _, err := r.Route(context.Background(), &RouteRequest{ID: id, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}}); err != nil {
			t.Fatal(err)
		}
		if first {
			if err := r.PrefillDone(id); err != nil {
				t.Fatal(err)
			}
		}
		if err := free(id); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		end(fmt.Sprint("s", i), true, func(id string) error { return r.FreeOutput(id, 40+i) })
	}
	end("plain", true, r.Free)
	end("one", true, func(id string) error { return r.FreeOutput(id, 1) })
	end("nofirst", false, func(id string) error { return r.FreeOutput(id, 30) })
	_, _, n, mean := r.DecodeCalibration()
	if n != 5 {
		t.Fatalf("%d decode observations, want 5 (the streams with a first token and two tokens or more)", n)
	}
	// The mean output counts every counted stream (40–44, 1 and 30 tokens), by forgetting weights.
	if mean <= 1 || mean >= 44 {
		t.Fatalf("mean output %v, want within the counted streams' 1–44", mean)
	}
	cfg.DecodeWeight = 0
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	end("off", true, func(id string) error { return r.FreeOutput(id, 40) })
	if _, _, n, _ := r.DecodeCalibration(); n != 5 {
		t.Fatalf("at decode weight 0: %d observations, want the 5 from before", n)
	}
}
