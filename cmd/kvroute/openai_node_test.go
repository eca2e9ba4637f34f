package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The acceptance run of the official openai npm client (testdata/openai-node, version pinned by its
// package-lock.json) against kvroute serve with two models of different families, each with its own
// simulated workers: chat, stream, completions, embeddings, responses (unary and streamed),
// models.list / retrieve, n: 2, a forced tool call and an unknown model's 404, each checked field by
// field by acceptance.mjs. `make test` installs the client (npm ci); without node the test is skipped.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the openai npm client acceptance run needs node and npm")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "openai-node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Fatal("node is installed but npm is not: cannot install the openai client")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--prefix", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	_, herr := captureCLI(t)
	f, _, code, ok := parseFrontend("serve", twoModelArgs(t), nil)
	if !ok {
		t.Fatalf("exit %d: %s", code, herr.String())
	}
	app, err := startServe(f, serveConfig{workers: 2, gpuBlocks: 1024, speedup: 50}, newRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.closeFleet)
	t.Cleanup(app.stop)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "acceptance.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KVROUTE_BASE_URL=http://"+app.ln.Addr().String(), "MODEL_A=qwen", "MODEL_B=llama")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client acceptance: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
