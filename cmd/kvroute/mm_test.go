package main

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/mm"
)

// kvroute frontend's image stage by model: for a vision model it recognises but does not route (or
// cannot size), installed anyway, so that each request with an image is counted as a fallback with its
// reason; absent for a text model. (TestFrontendOpsFlags checks that a supported family is routed.)
func TestFrontendImageStageByModel(t *testing.T) {
	fixture, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	textModel, err := filepath.Abs(filepath.Join("..", "..", "testdata", "tokenizers", "llama3"))
	if err != nil {
		t.Fatal(err)
	}
	// The fixture without preprocessor_config.json: a Qwen3-VL whose image token counts are unknown.
	noProcessor := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"} {
		if err := os.Symlink(filepath.Join(fixture, f), filepath.Join(noProcessor, f)); err != nil {
			t.Fatal(err)
		}
	}
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewGray(image.Rect(0, 0, 64, 48))); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	tests := []struct {
		name, dir, served string
		logged            string // in the startup log
		counted           string // the fallback reason one image request is counted under; "" = no image stage
	}{
		{"unsupported family", fixture, "microsoft/Phi-4-multimodal-instruct", "Phi-4-multimodal is not routed", "unsupported_family"},
		{"no preprocessor_config.json", noProcessor, "Qwen/Qwen3-VL-2B-Instruct", "preprocessor_config.json is missing", "unknown_model"},
		{"text model", textModel, "llama3", "matches no vision processor family", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, herr := captureCLI(t)
			args := []string{"--model-path", tc.dir, "--model-name", tc.served, "--http-host", "127.0.0.1", "--http-port", "0",
				"--health-check-interval", "0", "--no-worker-self-test", "--worker", "id=1,url=http://127.0.0.1:9"}
			f, _, code, ok := parseFrontend("frontend", args, nil)
			if !ok {
				t.Fatalf("exit %d: %s", code, herr.String())
			}
			var logged bytes.Buffer
			app, err := startFrontend(f, newRegistry(), slog.New(slog.NewTextHandler(&logged, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(app.stop)
			if !strings.Contains(logged.String(), tc.logged) {
				t.Fatalf("startup log lacks %q:\n%s", tc.logged, logged.String())
			}
			base := "http://" + app.ln.Addr().String()
			body := `{"model":"` + tc.served + `","max_tokens":1,"messages":[{"role":"user","content":[` +
				`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(img.Bytes()) + `"}},` +
				`{"type":"text","text":"What is this?"}]}]}`
			resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body) // the worker is unreachable: the answer is an error
			resp.Body.Close()
			resp, err = hc.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics := string(b)
			switch tc.counted {
			case "":
				if strings.Contains(metrics, "kvroute_mm_") {
					t.Fatalf("a text model has an image stage:\n%s", grepMetric(metrics, "kvroute_mm_"))
				}
			default:
				want := `kvroute_mm_routing_fallback_total{reason="` + tc.counted + `"} 1`
				if !strings.Contains(metrics, want) || !strings.Contains(metrics, "kvroute_mm_routed_requests_total 0") {
					t.Fatalf("want %s:\n%s", want, grepMetric(metrics, "kvroute_mm_"))
				}
			}
		})
	}
}

// grepMetric is the lines of a /metrics page that contain sub.
func grepMetric(page, sub string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDataURIIdentityFlag: --mm-data-uri-identity picks the resolver's data: URI identity (payload by
// default, the whole string with uri, as Dynamo's default path); other values are refused.
func TestDataURIIdentityFlag(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		asString bool
	}{{nil, false}, {[]string{"--mm-data-uri-identity", "payload"}, false}, {[]string{"--mm-data-uri-identity", "uri"}, true}} {
		_, herr := captureCLI(t)
		f, _, code, ok := parseFrontend("frontend", append([]string{"--worker", "id=1,url=http://127.0.0.1:9"}, tc.args...), nil)
		if !ok {
			t.Fatalf("%v: exit %d: %s", tc.args, code, herr.String())
		}
		if got := f.resolveConfig().DataURIAsString; got != tc.asString {
			t.Errorf("%v: DataURIAsString %v", tc.args, got)
		}
	}
	_, herr := captureCLI(t)
	if _, _, code, ok := parseFrontend("frontend", []string{"--mm-data-uri-identity", "bytes"}, nil); ok || code != 2 || !strings.Contains(herr.String(), "mm-data-uri-identity") {
		t.Fatalf("bad value: ok=%v code %d: %s", ok, code, herr.String())
	}
}

// --mm-max-request-image-bytes and --mm-image-bytes-in-flight reach the image stage's configurations,
// and a bound that is not positive is refused at startup.
func TestImageByteFlags(t *testing.T) {
	worker := []string{"--worker", "id=1,url=http://127.0.0.1:9"}
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("frontend", worker, nil)
	if !ok {
		t.Fatalf("defaults: exit %d: %s", code, herr.String())
	}
	if rc, pc := f.resolveConfig(), f.probeConfig(); rc.MaxRequestBytes != mm.DefaultMaxRequestBytes || pc.MaxFetchBytesInFlight != mm.DefaultMaxFetchBytesInFlight {
		t.Fatalf("defaults: request %d, in flight %d", rc.MaxRequestBytes, pc.MaxFetchBytesInFlight)
	}
	f, _, code, ok = parseFrontend("frontend", append(worker, "--mm-max-request-image-bytes", "1000", "--mm-image-bytes-in-flight", "5000"), nil)
	if !ok {
		t.Fatalf("set: exit %d: %s", code, herr.String())
	}
	if rc, pc := f.resolveConfig(), f.probeConfig(); rc.MaxRequestBytes != 1000 || pc.MaxFetchBytesInFlight != 5000 || pc.Validate() != nil || rc.Validate() != nil {
		t.Fatalf("set: request %d, in flight %d", rc.MaxRequestBytes, pc.MaxFetchBytesInFlight)
	}
	for _, bad := range []string{"--mm-max-request-image-bytes", "--mm-image-bytes-in-flight"} {
		_, herr := captureCLI(t)
		if _, _, code, ok := parseFrontend("frontend", append(worker, bad, "0"), nil); ok || code != 2 || !strings.Contains(herr.String(), bad[2:]) {
			t.Fatalf("%s 0: ok=%v code %d: %s", bad, ok, code, herr.String())
		}
	}
}

// TestImageBytesInFlightGauge: with --frontend-decoding, kvroute_media_fetch_bytes_in_flight shows a
// download's reserved bytes (its Content-Length) while the image server holds the body half-sent, and
// drops to 0 once the download ends; one prober serves the process, so one unlabelled series.
func TestImageBytesInFlightGauge(t *testing.T) {
	const size = 200_000
	release := make(chan struct{})
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		testutil.WriteHeld(w, r, make([]byte, size), release)
	}))
	t.Cleanup(images.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	app := launchFrontend(t, []string{"--model-path", modelDir, "--http-host", "127.0.0.1", "--http-port", "0",
		"--health-check-interval", "0", "--no-worker-self-test", "--worker", "id=1,url=http://127.0.0.1:9",
		"--frontend-decoding", "--media-allow-hosts", "127.0.0.1"})
	base := "http://" + app.ln.Addr().String()
	gauge := func() string {
		_, m := getBody(t, base+"/metrics")
		for _, line := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(line, "kvroute_media_fetch_bytes_in_flight") {
				return line
			}
		}
		return ""
	}
	if g := gauge(); g != "kvroute_media_fetch_bytes_in_flight 0" {
		t.Fatalf("idle: %q", g)
	}
	done := make(chan int, 1)
	go func() {
		body := `{"model":"` + app.name + `","max_tokens":1,"messages":[{"role":"user","content":[` +
			`{"type":"image_url","image_url":{"url":"` + images.URL + `/cat.png"}},{"type":"text","text":"What is this?"}]}]}`
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	waitUntil(t, "the download's bytes in the gauge", func() bool {
		return gauge() == "kvroute_media_fetch_bytes_in_flight "+strconv.Itoa(size)
	})
	close(release)
	if st := <-done; st == 0 || st == http.StatusOK {
		t.Fatalf("a request with an undecodable image answered %d", st)
	}
	waitUntil(t, "the gauge back to 0", func() bool { return gauge() == "kvroute_media_fetch_bytes_in_flight 0" })
}

// TestServeImagesFromAllowedHost: kvroute serve's simulated workers fetch images through the guard with
// the command's --media-allow-hosts, as the frontend does: an image on an allowed internal host is
// answered 200. Before, the frontend routed it and the worker refused the same URL (blocked address).
func TestServeImagesFromAllowedHost(t *testing.T) {
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewGray(image.Rect(0, 0, 64, 48))); err != nil {
		t.Fatal(err)
	}
	images := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(img.Bytes())
	}))
	t.Cleanup(images.Close)
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", []string{"--model-path", modelDir, "--http-host", "127.0.0.1", "--http-port", "0",
		"--health-check-interval", "0", "--media-allow-hosts", "127.0.0.1"}, nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{workers: 1, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)
	body := `{"model":"` + app.name + `","max_tokens":1,"messages":[{"role":"user","content":[` +
		`{"type":"image_url","image_url":{"url":"` + images.URL + `/cat.png"}},{"type":"text","text":"What is this?"}]}]}`
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post("http://"+app.ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("an image on an allowed host: %d %s", resp.StatusCode, b)
	}
}
