package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"
)

// captureCLI swaps the help and error writers for buffers for the duration of the test.
func captureCLI(t *testing.T) (out, errs *bytes.Buffer) {
	out, errs = &bytes.Buffer{}, &bytes.Buffer{}
	oldOut, oldErr := helpOut, errOut
	helpOut, errOut = out, errs
	t.Cleanup(func() { helpOut, errOut = oldOut, oldErr })
	return out, errs
}

func TestHelpIsGroupedOnStdout(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"--help"}, &out, &errs); code != 0 || !strings.Contains(out.String(), "commands:") || errs.Len() != 0 {
		t.Fatalf("kvroute --help: exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
	out.Reset()
	if code := run([]string{"version"}, &out, &errs); code != 0 || !strings.HasPrefix(out.String(), "kvroute ") {
		t.Fatalf("kvroute version: exit %d, %q", code, out.String())
	}
	for _, args := range [][]string{{"help", "frontend"}, {"frontend", "--help"}, {"help", "serve"}} {
		hout, herr := captureCLI(t)
		if code := run(args, io.Discard, io.Discard); code != 0 || herr.Len() != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, herr.String())
		}
		h := hout.String()
		for _, want := range []string{"usage: kvroute " + args[len(args)-1], "\nHTTP server:\n", "\nRouting (Dynamo's --router-* flags):\n",
			"\nLogging, probes and shutdown:\n", "  --event-plane string\n", "--http-host string (also --host)", "--decode-fallback"} {
			if args[1] == "--help" {
				want = strings.Replace(want, "usage: kvroute --help", "usage: kvroute frontend", 1)
			}
			if !strings.Contains(h, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
	}
	// Every command's help goes to stdout with exit 0.
	for _, name := range commandNames() {
		hout, herr := captureCLI(t)
		if code := run([]string{"help", name}, io.Discard, io.Discard); code != 0 || hout.Len() == 0 || herr.Len() != 0 {
			t.Errorf("kvroute help %s: exit %d, %d bytes of help, stderr %q", name, code, hout.Len(), herr.String())
		}
	}
}

func TestFlagMistakesGetOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown flag", []string{"frontend", "--routr-mode", "kv"}, []string{"unknown flag --routr-mode", "did you mean --router-mode?"}},
		{"unknown mode", []string{"frontend", "--router-mode", "kv-aware"}, []string{"want one of round-robin, random", "did you mean kv?"}},
		{"refused flag", []string{"frontend", "--use-remote-indexer"}, []string{"--use-remote-indexer:", "always in-process"}},
		{"refused value", []string{"serve", "--discovery-backend", "etcd"}, []string{"--discovery-backend etcd: not supported"}},
		{"half tls pair", []string{"frontend", "--tls-cert-path", "c.pem"}, []string{"--tls-key-path go together"}},
		{"bad log level", []string{"frontend", "--log-level", "verbose"}, []string{"--log-level \"verbose\": want one of debug, info"}},
		{"relay typo", []string{"relay", "--nats-ur", "x"}, []string{"did you mean --nats-url?"}},
		{"mocker typo", []string{"mocker", "--num-worker", "2"}, []string{"did you mean --num-workers?"}},
		{"unknown command", []string{"frontned"}, []string{"did you mean frontend?"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hout, herr := captureCLI(t)
			var errs bytes.Buffer
			code := run(tc.args, io.Discard, &errs)
			msg := herr.String() + errs.String()
			if code != 2 || hout.Len() != 0 || strings.Count(msg, "\n") != 1 {
				t.Fatalf("exit %d, want 2 and one line; stdout %q, stderr %q", code, hout.String(), msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
		})
	}
}

// dynamoLaunchLine is `python -m dynamo.frontend` with every flag of Dynamo's frontend configuration
// reference once (HTTP, router, fault tolerance, model discovery, infrastructure, monitoring,
// tokenizer), values as a deployment would give them. Flags kvroute refuses are tested apart.
func dynamoLaunchLine(cert, key, modelDir, dump, policy string) []string {
	return []string{
		"--http-host", "127.0.0.1", "--http-port", "0", "--tls-cert-path", cert, "--tls-key-path", key,
		"--router-mode", "kv", "--no-load-aware", "--router-kv-overlap-score-credit", "0.8",
		"--router-kv-overlap-score-credit-decay", "0.5", "--router-prefill-load-scale", "1.0",
		"--router-host-cache-hit-weight", "0.75", "--router-disk-cache-hit-weight", "0.25",
		"--shared-cache-multiplier", "0.5", "--shared-cache-type", "none",
		"--router-temperature", "0.0", "--router-selection-policy", "linear", "--router-kv-events", "--router-ttl-secs", "120",
		"--router-predicted-ttl-secs", "0", "--router-min-initial-workers", "0", "--router-session-affinity-ttl-secs", "600",
		"--router-replica-sync=false", "--router-snapshot-threshold", "1000000", "--no-router-reset-states",
		"--router-track-active-blocks", "--router-assume-kv-reuse", "--no-router-track-output-blocks",
		"--router-track-prefill-tokens", "--router-prefill-load-model", "none", "--router-event-threads", "2",
		"--router-active-sequence-stride", "1", "--router-queue-threshold", "4.0", "--router-queue-policy", "fcfs",
		"--router-policy-config", policy,
		"--no-decode-fallback", "--migration-limit", "3", "--active-decode-blocks-threshold", "0.9",
		"--active-prefill-tokens-threshold", "10000", "--active-prefill-tokens-threshold-frac", "1.5", "--busy-threshold", "0.95",
		"--namespace", "prod", "--model-name", "qwen", "--model-path", modelDir, "--kv-cache-block-size", "16",
		"--discovery-backend", "mem", "--request-plane", "http", "--event-plane", "zmq",
		"--metrics-prefix", "dynamo_frontend", "--dump-config-to", dump, "--tokenizer", "default", "--dyn-chat-processor", "dynamo",
	}
}

func TestDynamoLaunchLineStarts(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSignedCert(t, dir)
	dump := filepath.Join(dir, "config.json")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("default_policy_family: chat\nuncached_isl_buckets:\n  - {min_tokens: 0, bucket: warm}\n"+
		"policy_classes:\n  - {name: chat-warm, policy_family: chat, cache_bucket: warm, quantum: 8192}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	modelDir, err := filepath.Abs(filepath.Join("..", "..", defaultModelPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DYN_LOG", "warn,dynamo_llm=debug")
	args := dynamoLaunchLine(cert, key, modelDir, dump, policy)
	// The scheduler's flags of the reference table that are not registered yet are left out, by name.
	probe := flag.NewFlagSet("probe", flag.ContinueOnError)
	if _, err := addFrontendFlags(probe, "kv"); err != nil {
		t.Fatal(err)
	}
	var line []string
	for i := 0; i < len(args); i++ {
		name := strings.SplitN(strings.TrimLeft(args[i], "-"), "=", 2)[0]
		takesValue := !strings.Contains(args[i], "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--")
		if probe.Lookup(name) == nil {
			t.Logf("--%s is not registered on this tree; left out", name)
			if takesValue {
				i++
			}
			continue
		}
		line = append(line, args[i])
		if takesValue {
			i++
			line = append(line, args[i])
		}
	}
	_, herr := captureCLI(t)
	f, log, code, ok := parseFrontend("frontend", line, nil)
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	if *f.host != "127.0.0.1" || *f.ops.namespace != "prod" || f.cfg.MigrationLimit != 3 || !f.cfg.ActiveDecodeBlocksThreshold.Set ||
		f.cfg.ActiveDecodeBlocksThreshold.V != 0.95 || *f.nats.discovery != "static" {
		t.Fatalf("flags not applied: host %s ns %s migration %d busy %v discovery %s", *f.host, *f.ops.namespace, f.cfg.MigrationLimit,
			f.cfg.ActiveDecodeBlocksThreshold, *f.nats.discovery)
	}
	app, err := startFrontend(f, newRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer app.stop()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	base := "https://" + app.ln.Addr().String()
	resp, err := hc.Get(base + "/live")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"live"`) {
		t.Fatalf("/live over TLS: %d %s", resp.StatusCode, b)
	}
	resp, err = hc.Get(base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "0 of 1 required workers ready") {
		t.Fatalf("/ready with no workers: %d %s", resp.StatusCode, b)
	}
	var dumped map[string]string
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dumped); err != nil || dumped["namespace"] != "prod" || dumped["log-level"] != "warn,dynamo_llm=debug" {
		t.Fatalf("--dump-config-to: %v %v", err, dumped)
	}
}

func TestDynamoEnvironment(t *testing.T) {
	t.Setenv("DYN_HTTP_PORT", "18123")
	t.Setenv("DYN_HTTP_HOST", "127.0.0.2")
	t.Setenv("DYN_NAMESPACE", "team-a")
	t.Setenv("DYN_LOGGING_JSONL", "1")
	t.Setenv("DYN_HTTP_BODY_LIMIT_MB", "3")
	t.Setenv("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", "0.5")
	t.Setenv("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", "2")
	captureCLI(t)
	f, _, code, ok := parseFrontend("frontend", nil, nil)
	if !ok {
		t.Fatalf("exit %d", code)
	}
	if *f.port != 18123 || *f.host != "127.0.0.2" || *f.ops.namespace != "team-a" || *f.ops.log.format != "json" ||
		*f.maxBody != 3<<20 || *f.ops.grace != 500*time.Millisecond || *f.ops.drain != 2*time.Second {
		t.Fatalf("environment not applied: port %d host %s ns %s format %s body %d grace %v drain %v", *f.port, *f.host,
			*f.ops.namespace, *f.ops.log.format, *f.maxBody, *f.ops.grace, *f.ops.drain)
	}
	// An explicit flag beats the environment.
	if f, _, _, ok = parseFrontend("frontend", []string{"--http-port", "9"}, nil); !ok || *f.port != 9 {
		t.Fatal("--http-port does not override DYN_HTTP_PORT")
	}
	t.Setenv("DYN_USE_REMOTE_INDEXER", "true")
	_, herr := captureCLI(t)
	if _, _, code, ok := parseFrontend("frontend", nil, nil); ok || code != 2 || !strings.Contains(herr.String(), "$DYN_USE_REMOTE_INDEXER") {
		t.Fatalf("DYN_USE_REMOTE_INDEXER=true: exit %d, %q", code, herr.String())
	}
	t.Setenv("DYN_USE_REMOTE_INDEXER", "")
	// A boolean variable that is neither true nor false fails startup, as a malformed number does.
	for _, name := range []string{"KVROUTE_ACCESS_LOG", "DYN_LOGGING_JSONL", "KVROUTE_PPROF", "DYN_ROUTER_RESET_STATES"} {
		t.Setenv(name, "maybe")
		_, herr := captureCLI(t)
		if _, _, code, ok := parseFrontend("frontend", nil, nil); ok || code != 2 || !strings.Contains(herr.String(), "$"+name+` "maybe"`) {
			t.Fatalf("%s=maybe: exit %d, %q", name, code, herr.String())
		}
		t.Setenv(name, "Off")
	}
	if f, _, _, ok := parseFrontend("frontend", nil, nil); !ok || *f.ops.pprof || *f.ops.log.access || *f.ops.log.format != "text" {
		t.Fatal("booleans set Off read as true")
	}
}

func writeSelfSignedCert(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// TestEdgeBoundsPositive: the edge's bounds refuse 0 and negative values where no other meaning is
// documented (they were read as the default: a bound asked for and not applied); --max-conns-per-ip
// keeps "negative: none" and refuses 0, which would refuse every client.
func TestEdgeBoundsPositive(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--max-concurrent-requests", "0"}, false},
		{[]string{"--max-concurrent-requests", "-1"}, false},
		{[]string{"--max-header-bytes", "0"}, false},
		{[]string{"--max-body-bytes-in-flight", "-1"}, false},
		{[]string{"--body-timeout", "0s"}, false},
		{[]string{"--header-timeout", "-1s"}, false},
		{[]string{"--max-conns-per-ip", "0"}, false},
		{[]string{"--max-conns-per-ip", "-1"}, true},
		{[]string{"--max-concurrent-requests", "8"}, true},
	} {
		_, herr := captureCLI(t)
		_, _, code, ok := parseFrontend("frontend", append([]string{"--worker", "id=1,url=http://127.0.0.1:9"}, tc.args...), nil)
		if ok != tc.ok || !ok && (code != 2 || !strings.Contains(herr.String(), tc.args[0])) {
			t.Errorf("%v: ok %v exit %d, stderr %q", tc.args, ok, code, herr.String())
		}
	}
}
