package main

import (
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
