package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/kvroute/kvroute/workers/k8spool"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

const eppModel = "../../testdata/models/Qwen3-VL-2B-Instruct"

// eppFleet starts n simulated workers and returns their specs.
func eppFleet(t *testing.T, n int) []registry.Spec {
	t.Helper()
	m, err := loadModel(eppModel) // loaded once for the test binary (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: mocker.ModelOf(m, "Qwen3-VL-2B-Instruct"), KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize, tmpl.Engine.SpeedupRatio = 16, 50
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: n, Template: tmpl, FirstID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fleet.Close() })
	var out []registry.Spec
	for _, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sp)
	}
	return out
}

// freePort is a port free now, below the kernel's ephemeral range (launchPortRange), so that no
// connection or bind to port 0 takes it before the command under test binds it.
func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(launchPortRange(t, 1))
}

// startEPPTest parses args as kvroute epp does and starts it with kube as the Kubernetes clients.
func startEPPTest(t *testing.T, kube kubeClients, args ...string) *eppApp {
	t.Helper()
	_, herr := captureCLI(t)
	base := []string{"--model-path", eppModel, "--http-host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
		"--health-check-interval", "0", "--no-worker-self-test"}
	f, e, _, code, ok := parseEPP(append(base, args...))
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	a, err := startEPP(f, e, kube, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	return a
}

func dialEPP(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// pickOnce plays the gateway for one buffered chat request: the destination header, or the immediate
// status, or "" with continued=true when the picker let the request go on without one.
func pickOnce(t *testing.T, conn *grpc.ClientConn, content string) (dest string, immediate int, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := extproc.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return "", 0, err
	}
	h := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}
	if err := s.Send(&extproc.ProcessingRequest{ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED},
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{Headers: h}}}); err != nil {
		return "", 0, err
	}
	if _, err := s.Recv(); err != nil {
		return "", 0, err
	}
	body := fmt.Sprintf(`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":%q}],"max_tokens":2}`, content)
	if err := s.Send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{Body: []byte(body), EndOfStream: true}}}); err != nil {
		return "", 0, err
	}
	resp, err := s.Recv()
	if err != nil {
		return "", 0, err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return "", int(ir.GetStatus().GetCode()), nil
	}
	for _, hv := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			dest = string(hv.GetHeader().GetRawValue())
		}
	}
	return dest, 0, nil
}

func healthOf(t *testing.T, conn *grpc.ClientConn, svc string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
	return r.GetStatus(), err
}

func eppWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEPPCommand: kvroute epp serves ext_proc over TLS on --grpc-port (a self-signed certificate by
// default; plain text is refused), health on --grpc-health-port, answers the destination with
// --destination-fallbacks endpoints after the primary; with --secure-serving=false and
// --failure-mode FailOpen a picker without workers lets the request go on instead of answering 503.
func TestEPPCommand(t *testing.T) {
	specs := eppFleet(t, 2)
	hp := freePort(t)
	a := startEPPTest(t, nil, "--grpc-health-port", hp, "--destination-fallbacks", "1",
		"--worker", workerFlag(specs[0]), "--worker", workerFlag(specs[1]))
	addr := a.grpcLn.Addr().String()

	tlsConn := dialEPP(t, addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
	plain := dialEPP(t, addr, nil)
	if _, err := healthOf(t, plain, "liveness"); err == nil {
		t.Fatal("plain text accepted on the TLS port")
	}
	probe := dialEPP(t, "127.0.0.1:"+hp, nil)
	eppWaitFor(t, "readiness SERVING on --grpc-health-port", func() bool {
		st, err := healthOf(t, probe, "readiness")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	})
	dest, imm, err := pickOnce(t, tlsConn, "hello over TLS")
	if err != nil || imm != 0 {
		t.Fatalf("pick: %v, immediate %d", err, imm)
	}
	eps := strings.Split(dest, ",")
	want := map[string]bool{addrOfURL(specs[0].URL): true, addrOfURL(specs[1].URL): true}
	if len(eps) != 2 || !want[eps[0]] || !want[eps[1]] || eps[0] == eps[1] {
		t.Fatalf("destination %q, workers %v", dest, want)
	}

	// The outcome is counted on the HTTP port's /metrics.
	resp, err := http.Get("http://" + a.ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `kvroute_epp_requests_total{outcome="picked"} 1`) {
		t.Fatalf("/metrics lacks the picked request:\n%s", page)
	}

	// No workers, plain text, FailOpen: the request continues without a destination.
	b := startEPPTest(t, nil, "--secure-serving=false", "--grpc-health-port", "0", "--failure-mode", "FailOpen")
	conn := dialEPP(t, b.grpcLn.Addr().String(), nil)
	if st, err := healthOf(t, conn, "readiness"); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness without workers: %v %v", st, err)
	}
	if dest, imm, err := pickOnce(t, conn, "hello"); err != nil || imm != 0 || dest != "" {
		t.Fatalf("FailOpen: dest %q, immediate %d, %v", dest, imm, err)
	}
	c := startEPPTest(t, nil, "--secure-serving=false", "--grpc-health-port", "0", "--max-conns", "2")
	if _, imm, err := pickOnce(t, dialEPP(t, c.grpcLn.Addr().String(), nil), "hello"); err != nil || imm != 503 {
		t.Fatalf("FailClose: immediate %d, %v", imm, err)
	}

	// --max-conns 2 bounds the gRPC port too: the gateway's connection and one more are held, a third
	// is closed at once (accepted in order, so the second is held before the third arrives).
	var raw [2]net.Conn
	for i := range raw {
		var err error
		if raw[i], err = net.Dial("tcp", c.grpcLn.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer raw[i].Close()
	}
	_ = raw[1].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := raw[1].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection past --max-conns 2: %v, want it closed", err)
	}
}

func workerFlag(sp registry.Spec) string {
	return fmt.Sprintf("id=%d,url=%s,events=%s,replay=%s", sp.ID, sp.URL, sp.Events, sp.Replay)
}

func addrOfURL(u string) string { return strings.TrimPrefix(u, "http://") }

// TestEPPCertPath: --cert-path's tls.crt is the certificate the gRPC port presents.
func TestEPPCertPath(t *testing.T) {
	cert, err := servingCert("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startEPPTest(t, nil, "--grpc-health-port", "0", "--cert-path", dir)
	var seen []byte
	conn := dialEPP(t, a.grpcLn.Addr().String(), credentials.NewTLS(&tls.Config{InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			seen = raw[0]
			return nil
		}}))
	if _, err := healthOf(t, conn, "liveness"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(seen, cert.Certificate[0]) {
		t.Fatal("the gRPC port did not present --cert-path's certificate")
	}
}

// TestEPPPool: with --pool-name the workers are the ready pods of the InferencePool (here a v1alpha2
// pool, --pool-group inference.networking.x-k8s.io, in --pool-namespace), the model server port from the
// pool and the KV event and replay ports from --pool-kv-events-port / --pool-kv-replay-port unless a pod
// annotates its own; the picker's destinations are those pods.
func TestEPPPool(t *testing.T) {
	specs := eppFleet(t, 2)
	port := func(u string) string {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "tcp://"))
		return p
	}
	mkPod := func(name string, sp registry.Spec, ann map[string]string) *unstructured.Unstructured {
		a := map[string]any{k8spool.AnnotationWorkerID: strconv.FormatUint(sp.ID, 10), k8spool.AnnotationPort: port(sp.URL)}
		for k, v := range ann {
			a[k] = v
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "llm", "labels": map[string]any{"app": "vllm"}, "annotations": a},
			"status": map[string]any{"phase": "Running", "podIP": "127.0.0.1",
				"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
		}}
	}
	gvr := schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferencepools"}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
		"metadata": map[string]any{"name": "qwen", "namespace": "llm"},
		"spec":     map[string]any{"selector": map[string]any{"app": "vllm"}, "targetPortNumber": int64(1), "extensionRef": map[string]any{"name": "kvroute-epp"}},
	}}
	lists := map[schema.GroupVersionResource]string{gvr: "InferencePoolList", k8spool.PodsResource: "PodList"}
	dc := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, pool,
		mkPod("w1", specs[0], map[string]string{k8spool.AnnotationEventsPort: port(specs[0].Events), k8spool.AnnotationReplayPort: port(specs[0].Replay)}),
		mkPod("w2", specs[1], nil), // events and replay from the flags
	)
	var gotKubeconfig string
	kube := func(path string) (dynamic.Interface, error) {
		gotKubeconfig = path
		return dc, nil
	}
	a := startEPPTest(t, kube, "--secure-serving=false", "--grpc-health-port", "0", "--pool-name", "qwen", "--pool-namespace", "llm",
		"--pool-group", "inference.networking.x-k8s.io", "--pool-kv-events-port", port(specs[1].Events), "--pool-kv-replay-port", "7777",
		"--kubeconfig", "/dev/null/kubeconfig")
	if gotKubeconfig != "/dev/null/kubeconfig" {
		t.Fatalf("kubeconfig %q", gotKubeconfig)
	}
	eppWaitFor(t, "both pods as workers", func() bool { return len(a.router.Workers()) == 2 })
	for _, w := range a.router.Workers() {
		sp := specs[w.ID-1]
		wantEvents, wantURL := sp.Events, sp.URL
		if w.URL != wantURL || w.Events != wantEvents {
			t.Fatalf("worker %d: url %s events %s, want %s %s", w.ID, w.URL, w.Events, wantURL, wantEvents)
		}
	}
	st := a.watcher.Workers()
	if st[1].Replay != "tcp://127.0.0.1:7777" || st[0].Replay != specs[0].Replay {
		t.Fatalf("replay ports: %+v", st)
	}
	conn := dialEPP(t, a.grpcLn.Addr().String(), nil)
	eppWaitFor(t, "readiness after the pool synced", func() bool {
		s, err := healthOf(t, conn, "readiness")
		return err == nil && s == healthpb.HealthCheckResponse_SERVING
	})
	dest, imm, err := pickOnce(t, conn, "hello pool")
	if err != nil || imm != 0 || (dest != addrOfURL(specs[0].URL) && dest != addrOfURL(specs[1].URL)) {
		t.Fatalf("pick: %q %d %v", dest, imm, err)
	}
	// A pod that leaves the pool leaves the candidates.
	if err := dc.Resource(k8spool.PodsResource).Namespace("llm").Delete(context.Background(), "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eppWaitFor(t, "w1 gone", func() bool { return len(a.router.Workers()) == 1 })
}

// TestEPPKubeconfig: --kubeconfig is the file the pool watcher's clients are built from.
func TestEPPKubeconfig(t *testing.T) {
	_, herr := captureCLI(t)
	missing := filepath.Join(t.TempDir(), "nope")
	f, e, _, code, ok := parseEPP([]string{"--model-path", eppModel, "--http-host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
		"--grpc-health-port", "0", "--health-check-interval", "0", "--pool-name", "qwen", "--kubeconfig", missing})
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	_, err := startEPP(f, e, realKubeClients, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing kubeconfig: %v", err)
	}
	good := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n"
	if err := os.WriteFile(good, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := realKubeClients(good); err != nil {
		t.Fatal(err)
	}
	if cfg, err := kubeConfig(good); err != nil || cfg.Host != "http://127.0.0.1:1" {
		t.Fatalf("client config for %v (%v), not the kubeconfig's server", cfg, err)
	}
}

// TestEPPRefusesDisaggregation: a gateway sends a request to one endpoint, so kvroute epp refuses prefill
// workers with the reason instead of picking decode workers that never get a prefill.
func TestEPPRefusesDisaggregation(t *testing.T) {
	_, herr := captureCLI(t)
	f, e, _, code, ok := parseEPP([]string{"--model-path", eppModel, "--http-host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
		"--grpc-health-port", "0", "--health-check-interval", "0", "--no-worker-self-test",
		"--worker", "id=1,url=http://127.0.0.1:1,role=prefill", "--worker", "id=2,url=http://127.0.0.1:2"})
	if !ok {
		t.Fatalf("parse: exit %d: %s", code, herr.String())
	}
	_, err := startEPP(f, e, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "kvroute frontend") {
		t.Fatalf("prefill workers: %v", err)
	}
}
