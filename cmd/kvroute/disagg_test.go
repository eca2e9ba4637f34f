package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/frontend"
)

// TestDisaggFlags: the disaggregation flags reach the frontend's configuration, and bad values are one
// line on stderr with exit 2.
func TestDisaggFlags(t *testing.T) {
	_, errs := captureCLI(t)
	f, _, code, ok := parseFrontend("frontend", []string{"--decode-fallback", "--conditional-prefill-policy", "threshold_only",
		"--conditional-prefill-bypass-below-tokens", "100", "--conditional-prefill-disagg-above-tokens", "900",
		"--conditional-prefill-roomy-ratio", "0.25"}, nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, errs)
	}
	want := frontend.DisaggConfig{DecodeFallback: true, BypassPolicy: frontend.BypassThresholdOnly, BypassBelowTokens: 100, DisaggAboveTokens: 900, RoomyRatio: 0.25}
	if f.pd != want {
		t.Fatalf("config %+v, want %+v", f.pd, want)
	}
	if d, _, _, _ := parseFrontend("frontend", nil, nil); d.pd != frontend.DefaultDisaggConfig() {
		t.Fatalf("defaults %+v", d.pd)
	}
	t.Setenv("DYN_DECODE_FALLBACK", "true")
	if d, _, _, _ := parseFrontend("frontend", nil, nil); !d.pd.DecodeFallback {
		t.Fatal("DYN_DECODE_FALLBACK=true did not turn the fallback on")
	}
	for _, bad := range [][]string{{"--conditional-prefill-policy", "regression_only"}, {"--conditional-prefill-roomy-ratio", "-1"}} {
		errs.Reset()
		if _, _, code, ok := parseFrontend("frontend", bad, nil); ok || code != 2 || !strings.Contains(errs.String(), "conditional prefill") {
			t.Fatalf("%v: ok=%v code=%d stderr %q", bad, ok, code, errs)
		}
	}
}

// TestServePrefillDecode: kvroute serve --prefill 1 --decode 2 runs a disaggregated fleet: /v1/workers
// lists the roles, and with --conditional-prefill-policy never even a short prompt takes the prefill hop
// (the default, token_cap, serves it aggregated).
func TestServePrefillDecode(t *testing.T) {
	captureCLI(t)
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"never", "token_cap"} {
		t.Run(policy, func(t *testing.T) {
			f, _, code, ok := parseFrontend("serve", []string{"--http-host", "127.0.0.1", "--http-port", "0", "--health-check-interval", "0",
				"--worker-self-test=false", "--model-path", modelDir, "--conditional-prefill-policy", policy}, nil)
			if !ok {
				t.Fatalf("exit %d", code)
			}
			app, err := startServe(f, serveConfig{gpuBlocks: 1024, speedup: 50, prefill: 1, decode: 2}, newRegistry(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer app.closeFleet()
			defer app.stop()
			base := "http://" + app.ln.Addr().String()
			hc := &http.Client{Timeout: 30 * time.Second}
			resp, err := hc.Get(base + "/v1/workers")
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Count(string(page), `"role":"prefill"`) != 1 || strings.Count(string(page), `"role":"decode"`) != 2 {
				t.Fatalf("/v1/workers: %s", page)
			}
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true}`, *f.modelName)
			// The decode workers' event streams connect asynchronously; a request before then is still served.
			resp, err = hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			serving := map[string]string{"never": "disaggregated", "token_cap": "bypassed"}[policy]
			if resp.StatusCode != 200 || resp.Header.Get("x-kvroute-serving") != serving || !strings.HasSuffix(strings.TrimSpace(string(out)), "data: [DONE]") {
				t.Fatalf("status %d serving %q: %s", resp.StatusCode, resp.Header.Get("x-kvroute-serving"), out)
			}
			if policy == "never" && resp.Header.Get("x-kvroute-prefill-worker-id") != "1" {
				t.Fatalf("prefill worker %q, want 1", resp.Header.Get("x-kvroute-prefill-worker-id"))
			}
			resp, err = hc.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			page, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := `kvroute_disagg_requests_total{serving="` + serving + `"} 1`; !strings.Contains(string(page), want) {
				t.Fatalf("/metrics lacks %s", want)
			}
		})
	}
}

// TestServeTwoModelsDisaggregated: with two models, --prefill 1 --decode 1 gives each model its own
// prefill core: a request takes its prefill hop on its own model's prefill worker, the counters carry the
// model, and a prefill worker removed and registered again over the admin API joins its model's core.
func TestServeTwoModelsDisaggregated(t *testing.T) {
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", append(twoModelArgs(t), "--conditional-prefill-policy", "never"), nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{gpuBlocks: 1024, speedup: 50, prefill: 1, decode: 1}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	base := "http://" + app.ln.Addr().String()
	var list struct {
		Workers []struct {
			ID          int    `json:"worker_id"`
			URL         string `json:"url"`
			Role, Model string
		} `json:"workers"`
	}
	if st, b := getBody(t, base+"/v1/workers"); st != 200 || json.Unmarshal(b, &list) != nil || len(list.Workers) != 4 {
		t.Fatalf("/v1/workers: %d %s", st, b)
	}
	url := map[int]string{}
	for _, w := range list.Workers {
		url[w.ID] = w.URL
	}
	// Workers are numbered in --model order, prefill first: qwen 1 (prefill) and 2, llama 3 (prefill) and 4.
	served := func(model string) (serving, prefill, decode string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": "hello"}}})
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, out)
		}
		h := resp.Header
		return h.Get("x-kvroute-serving"), h.Get("x-kvroute-prefill-worker-id"), h.Get("x-kvroute-worker-id")
	}
	for _, c := range []struct{ model, prefill, decode string }{{"qwen", "1", "2"}, {"llama", "3", "4"}} {
		if s, p, d := served(c.model); s != "disaggregated" || p != c.prefill || d != c.decode {
			t.Errorf("%s: served %q, prefill worker %q, decode worker %q; want disaggregated on %s then %s", c.model, s, p, d, c.prefill, c.decode)
		}
	}
	_, m := getBody(t, base+"/metrics")
	for _, model := range []string{"qwen", "llama"} {
		if want := `kvroute_disagg_requests_total{model="` + model + `",serving="disaggregated"} 1`; !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Without its prefill worker llama is served aggregated on its decode worker; registered again, the
	// worker is llama's prefill worker, not qwen's.
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/workers/3", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("DELETE /v1/workers/3: %d", resp.StatusCode)
	}
	if s, p, d := served("llama"); s != "" || p != "" || d != "4" {
		t.Errorf("llama without a prefill worker: served %q, prefill %q, decode %q; want aggregated on 4", s, p, d)
	}
	if st, _, _, b := post(t, base, "/v1/workers", map[string]any{"id": 3, "url": url[3], "model": "llama", "role": "prefill"}); st != 200 {
		t.Fatalf("register llama's prefill worker again: %d %s", st, b)
	}
	if s, p, _ := served("llama"); s != "disaggregated" || p != "3" {
		t.Errorf("llama after re-registering: served %q on prefill worker %q", s, p)
	}
	if s, p, _ := served("qwen"); s != "disaggregated" || p != "1" {
		t.Errorf("qwen: served %q on prefill worker %q", s, p)
	}
}
