package router

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/workers/registry"
)

// TestFreeOutputTeachesTheDecode: with --router-decode-weight 1, requests ended with FreeOutput (the
// frontend's count of a stream's tokens) reach the kvroute cost's decode fit, one observation each once
// they had a first token; Free, and FreeOutput of a request that streamed one token or none, teach
// nothing. At the default weight 0 nothing is kept.
func TestFreeOutputTeachesTheDecode(t *testing.T) {
	rcfg := DefaultConfig(4)
	reg := prometheus.NewRegistry()
	rcfg.Registerer = reg
	fc := clock.NewFake(time.Unix(1000, 0)) // each step 10 ms: every prefill and decode takes time
	rcfg.Clock = fc
	r := startRouter(t, rcfg)
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
		base := uint32(len(id)) << 16 // every request a prompt of its own: all of it uncached, a prefill to learn from
		for _, c := range id {
			base += uint32(c) << 4
		}
		if _, err := r.Route(context.Background(), &RouteRequest{ID: id, Tokens: []uint32{base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7}}); err != nil {
			t.Fatal(err)
		}
		fc.Advance(10 * time.Millisecond)
		if first {
			if err := r.PrefillDone(id); err != nil {
				t.Fatal(err)
			}
		}
		fc.Advance(10 * time.Millisecond)
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
	// /metrics shows the fits: the decode's observations and mean output, the prefill's first tokens.
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if got["kvroute_router_calibration_observations_total/decode"] != 5 || got["kvroute_router_calibration_observations_total/prefill"] != 7 ||
		got["kvroute_router_mean_output_tokens"] != mean {
		t.Fatalf("metrics: decode observations %v (want 5), prefill %v (want 7 first tokens), mean output %v (want %v)",
			got["kvroute_router_calibration_observations_total/decode"], got["kvroute_router_calibration_observations_total/prefill"],
			got["kvroute_router_mean_output_tokens"], mean)
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
