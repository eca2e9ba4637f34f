package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// `kvroute frontend --tokenizer none` starts without any model directory (a fleet fed token ids), says
// so at startup, answers a text prompt with a 422 that names the fix, and takes token-id prompts to
// routing.
func TestFrontendWithoutTokenizer(t *testing.T) {
	_, herr := captureCLI(t)
	args := []string{"--tokenizer", "none", "--model-path", "/nonexistent/model", "--http-host", "127.0.0.1", "--http-port", "0",
		"--health-check-interval", "0"}
	f, _, code, ok := parseFrontend("frontend", args, nil)
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if _, err := startFrontend(f, newRegistry(), log); err == nil || !strings.Contains(err.Error(), "--model-name") {
		t.Fatalf("no served model name: err %v", err)
	}
	*f.modelName = "Qwen/Qwen3-0.6B"
	app, err := startFrontend(f, newRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer app.stop()
	if !strings.Contains(logged.String(), "--tokenizer none") {
		t.Fatalf("startup does not say it runs without a tokenizer:\n%s", logged.String())
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	post := func(body string) (int, string) {
		resp, err := hc.Post("http://"+app.ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := post(`{"model":"Qwen/Qwen3-0.6B","prompt":"hello","max_tokens":1}`); st != http.StatusUnprocessableEntity || !strings.Contains(b, "token ids") {
		t.Fatalf("text prompt: %d %s", st, b)
	}
	// Token ids pass tokenization and reach routing, which has no worker to offer here.
	if st, b := post(`{"model":"Qwen/Qwen3-0.6B","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}`); st == http.StatusUnprocessableEntity || st < 500 || !strings.Contains(b, "error") {
		t.Fatalf("token prompt: %d %s", st, b)
	}
}
