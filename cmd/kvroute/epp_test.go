package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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

// testCA is a certificate authority made for a test, and a client certificate it signed.
type testCA struct {
	pem    []byte
	client tls.Certificate
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	ckey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " gateway"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	cDER, err := x509.CreateCertificate(rand.Reader, cTmpl, ca, &ckey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		client: tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: ckey}}
}

// TestEPPClientCA: with --client-ca-path the gRPC port takes only connections presenting a certificate
// one of its CAs signed (no certificate, or one of another CA, fails the handshake); the flag needs
// --secure-serving and a file with a certificate in it.
func TestEPPClientCA(t *testing.T) {
	gateway, stranger := newTestCA(t, "gateway"), newTestCA(t, "stranger")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, gateway.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startEPPTest(t, nil, "--grpc-health-port", "0", "--client-ca-path", caFile)
	addr := a.grpcLn.Addr().String()
	dial := func(certs ...tls.Certificate) error {
		_, err := healthOf(t, dialEPP(t, addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: certs})), "liveness")
		return err
	}
	if err := dial(); err == nil {
		t.Fatal("a connection without a client certificate was served")
	}
	if err := dial(stranger.client); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	if err := dial(gateway.client); err != nil {
		t.Fatalf("the gateway's client certificate: %v", err)
	}

	_, herr := captureCLI(t)
	if _, _, _, code, ok := parseEPP([]string{"--model-path", eppModel, "--secure-serving=false", "--client-ca-path", caFile}); ok || code != 2 {
		t.Fatalf("--client-ca-path without TLS: ok %v, exit %d", ok, code)
	}
	if !strings.Contains(herr.String(), "--client-ca-path needs --secure-serving") {
		t.Fatalf("stderr: %s", herr.String())
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, e, _, code, ok := parseEPP([]string{"--model-path", eppModel, "--http-host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
		"--grpc-health-port", "0", "--health-check-interval", "0", "--no-worker-self-test", "--client-ca-path", empty})
	if !ok {
		t.Fatalf("parse: exit %d", code)
	}
	if _, err := startEPP(f, e, nil, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA file without a certificate: %v", err)
	}
}

// TestEPPStreamsAndHandshakes: --max-concurrent-requests bounds the picker's ext_proc streams (one past
// it, on another connection, ends RESOURCE_EXHAUSTED and is counted refused), and --header-timeout bounds
// a connection's handshakes (a connection that sends nothing is closed; grpc-go's own default is 120 s).
func TestEPPStreamsAndHandshakes(t *testing.T) {
	specs := eppFleet(t, 1)
	a := startEPPTest(t, nil, "--secure-serving=false", "--grpc-health-port", "0", "--max-concurrent-requests", "1",
		"--header-timeout", "1s", "--worker", workerFlag(specs[0]))
	addr := a.grpcLn.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holdStream(t, ctx, addr)
	// The second stream ends before anything is read: its first receive has the status (a send may
	// already see the stream closed, io.EOF, depending on the race with the server's answer).
	second, err := extproc.NewExternalProcessorClient(dialEPP(t, addr, nil)).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second stream past --max-concurrent-requests 1: %v, want RESOURCE_EXHAUSTED", err)
	}
	resp, err := http.Get("http://" + a.ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`kvroute_epp_requests_total{outcome="refused"} 1`, "kvroute_epp_streams_open 1"} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("a silent connection: %v after %v, want it closed by the handshake deadline", err, time.Since(start))
	}
}

// TestEPPDrain: on stop the picker drains as the HTTP edge does. Readiness turns NOT_SERVING on both gRPC
// ports while --grpc-port still serves new streams, for up to --graceful-shutdown-grace-period, ending
// as soon as the last open stream closes; the request of a stream still open at
// --graceful-shutdown-timeout is cut and freed.
func TestEPPDrain(t *testing.T) {
	specs := eppFleet(t, 1)
	hp := freePort(t)
	a := startEPPTest(t, nil, "--secure-serving=false", "--grpc-health-port", hp, "--worker", workerFlag(specs[0]),
		"--graceful-shutdown-grace-period", "2m", "--graceful-shutdown-timeout", "1s")
	addr := a.grpcLn.Addr().String()
	probe := dialEPP(t, "127.0.0.1:"+hp, nil)
	eppWaitFor(t, "readiness SERVING", func() bool {
		st, err := healthOf(t, probe, "readiness")
		return err == nil && st == healthpb.HealthCheckResponse_SERVING
	})

	// A request the gateway is proxying: its headers in, its answer not yet out.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holdStream(t, ctx, addr)

	stopped := make(chan struct{})
	go func() { a.stop(); close(stopped) }()
	for _, conn := range []*grpc.ClientConn{probe, dialEPP(t, addr, nil)} {
		eppWaitFor(t, "readiness NOT_SERVING once the drain starts", func() bool {
			st, err := healthOf(t, conn, "readiness")
			return err == nil && st == healthpb.HealthCheckResponse_NOT_SERVING
		})
	}
	// Still picking during the grace period, on a new connection too.
	if dest, imm, err := pickOnce(t, dialEPP(t, addr, nil), "during the drain"); err != nil || imm != 0 || dest != addrOfURL(specs[0].URL) {
		t.Fatalf("a pick during the grace period: dest %q, immediate %d, %v", dest, imm, err)
	}
	select {
	case <-stopped:
		t.Fatal("stop returned with a stream open, inside the grace period")
	default:
	}
	// The last stream closes: the drain ends long before its 2 minutes.
	cancel()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("stop still waiting 30 s after the last stream closed")
	}

	// With no grace period, a stream still open is cut at the timeout and its request freed.
	b := startEPPTest(t, nil, "--secure-serving=false", "--grpc-health-port", "0", "--worker", workerFlag(specs[0]),
		"--graceful-shutdown-grace-period", "0s", "--graceful-shutdown-timeout", "100ms")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	s, err := extproc.NewExternalProcessorClient(dialEPP(t, b.grpcLn.Addr().String(), nil)).Process(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":"cut"}],"max_tokens":2}`
	for _, req := range []*extproc.ProcessingRequest{
		chatHeaders(),
		{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{Body: []byte(body), EndOfStream: true}}},
	} {
		if err := s.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	b.stop()
	if st := b.picker.Stats(); st.Picked != 1 || st.Broken != 1 || st.Streams != 0 {
		t.Fatalf("after the cut: %+v, want the picked request broken and freed", st)
	}
}

// chatHeaders is the first message of a buffered chat request's stream: its request headers.
func chatHeaders() *extproc.ProcessingRequest {
	h := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/chat/completions")}}}
	return &extproc.ProcessingRequest{ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_BUFFERED},
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{Headers: h}}}
}

// holdStream opens a picker stream on its own connection and sends a chat request's headers, as the
// gateway does when a request arrives, and reads the picker's answer: the stream stays open (a request
// in flight) until ctx ends.
func holdStream(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	held, err := extproc.NewExternalProcessorClient(dialEPP(t, addr, nil)).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Send(chatHeaders()); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Recv(); err != nil {
		t.Fatal(err)
	}
}
