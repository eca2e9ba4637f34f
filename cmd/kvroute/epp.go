package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/frontend/epp"
	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/k8spool"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("epp", "endpoint picker for Kubernetes inference gateways (Envoy ext_proc, Gateway API Inference Extension)", runEPP)
}

// eppFlags are kvroute epp's own flags; the frontend's (model, routing, workers, NATS) come with them.
type eppFlags struct {
	grpcPort, healthPort *int
	secure               *bool
	certPath             *string
	clientCA             *string
	fallbacks            *int
	failureMode          *string
	poolName, poolNS     *string
	poolGroup            *string
	kubeconfig           *string
	eventsPort           *int
	replayPort           *int
}

func addEPPFlags(fs *flag.FlagSet) *eppFlags {
	ns := envOr("POD_NAMESPACE", "default")
	return &eppFlags{
		grpcPort:    fs.Int("grpc-port", 9002, "ext_proc gRPC port the gateway calls (the InferencePool's endpointPickerRef port)"),
		healthPort:  fs.Int("grpc-health-port", 9003, "plain-text gRPC health port for the gateway's and kubelet's probes (liveness, readiness); 0: none (health stays on --grpc-port)"),
		secure:      fs.Bool("secure-serving", true, "TLS on --grpc-port: the --cert-path pair, else a self-signed certificate made at start"),
		certPath:    fs.String("cert-path", "", "directory holding tls.crt and tls.key for --secure-serving (a mounted Secret)"),
		clientCA:    fs.String("client-ca-path", "", "PEM file of CA certificates: a connection to --grpc-port must present a client certificate one of them signed (mutual TLS, needs --secure-serving); empty: any client (the gateway's network path is trusted)"),
		fallbacks:   fs.Int("destination-fallbacks", 0, "endpoints after the primary in x-gateway-destination-endpoint, cheapest first, for the gateway's retries (0 to 16)"),
		failureMode: fs.String("failure-mode", "FailClose", "when no worker can take a request: FailClose answers the error, FailOpen lets the gateway pick; the pool's endpointPickerRef.failureMode overrides it"),
		poolName:    fs.String("pool-name", "", "InferencePool whose ready pods are the workers (watched through the Kubernetes API); empty: --worker / NATS discovery"),
		poolNS:      fs.String("pool-namespace", ns, "namespace of --pool-name [$POD_NAMESPACE]"),
		poolGroup:   fs.String("pool-group", k8spool.DefaultResource.Group, "API group of the InferencePool: inference.networking.k8s.io (v1) or inference.networking.x-k8s.io (v1alpha2)"),
		kubeconfig:  fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig for --pool-name outside a cluster (default: the in-cluster service account) [$KUBECONFIG]"),
		eventsPort:  fs.Int("pool-kv-events-port", 5557, "pods' KV event (ZMQ PUB) port unless annotated kvroute.io/kv-events-port; 0: no events"),
		replayPort:  fs.Int("pool-kv-replay-port", 0, "pods' KV event replay port unless annotated kvroute.io/kv-replay-port; 0: none"),
	}
}

func (e *eppFlags) check() error {
	if err := oneOf("failure-mode", *e.failureMode, []string{string(epp.FailClose), string(epp.FailOpen)}); err != nil {
		return err
	}
	if *e.certPath != "" && !*e.secure {
		return fmt.Errorf("--cert-path needs --secure-serving")
	}
	if *e.clientCA != "" && !*e.secure {
		return fmt.Errorf("--client-ca-path needs --secure-serving")
	}
	return nil
}

// eppApp is a running picker: the frontend's core (router, request path, HTTP probes and metrics) plus
// the ext_proc gRPC server and, with --pool-name, the pool watcher.
type eppApp struct {
	*frontendApp
	picker   *epp.Server
	grpc     *grpc.Server
	health   *grpc.Server
	grpcLn   net.Listener
	healthLn net.Listener
	watcher  *k8spool.Watcher
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// kubeClients builds the Kubernetes client (the seam tests replace with client-go's fake). The watcher
// reads pods and the pool through the dynamic client only: the typed clientset and its informers
// compiled a few hundred generated API packages into the binary for one resource.
type kubeClients func(kubeconfig string) (dynamic.Interface, error)

func realKubeClients(kubeconfig string) (dynamic.Interface, error) {
	cfg, err := kubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

// kubeConfig is the API server and credentials of --kubeconfig, or of the pod's service account when
// it is empty.
func kubeConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfig, err)
	}
	return cfg, nil
}

// startEPP starts the frontend's core, the pool watcher and the gRPC servers.
func startEPP(f *frontendFlags, e *eppFlags, kube kubeClients, log *slog.Logger) (*eppApp, error) {
	for _, w := range f.workers {
		if w.RoleOf() == registry.RolePrefill {
			return nil, fmt.Errorf("--worker id=%d is a prefill worker: the gateway sends a request to one endpoint, so disaggregated prefill/decode needs kvroute frontend", w.ID)
		}
	}
	reg := newRegistry()
	app, err := startFrontend(f, reg, log)
	if err != nil {
		return nil, err
	}
	a := &eppApp{frontendApp: app, done: make(chan struct{})}
	// The gateway sends a request to one endpoint, and an InferencePool serves one model: a picker per pool.
	switch {
	case len(app.routers) > 1:
		close(a.done)
		a.stop()
		return nil, fmt.Errorf("several models: an InferencePool serves one model; run one kvroute epp per pool")
	}
	cfg := epp.DefaultConfig()
	cfg.Fallbacks, cfg.FailureMode, cfg.MaxBodyBytes = *e.fallbacks, epp.FailureMode(*e.failureMode), *f.maxBody
	cfg.MaxBodyBytesInFlight, cfg.MaxStreams = *f.srv.bodyInFlight, *f.srv.maxConc
	if a.picker, err = epp.NewServer(cfg, app.api, epp.RouterWorkers{R: app.router}); err != nil {
		a.stop()
		return nil, err
	}
	if err := a.picker.Register(reg); err != nil {
		a.stop()
		return nil, err
	}
	if *e.poolName == "" {
		close(a.done)
	} else if err := a.watchPool(e, kube); err != nil {
		close(a.done)
		a.stop()
		return nil, err
	}
	minReady := max(1, f.cfg.MinInitialWorkers)
	health := &epp.Health{Ready: func() bool {
		if a.watcher != nil && !a.watcher.Synced() {
			return false
		}
		return !app.probes.Draining() && app.probes.ReadyWorkers() >= minReady
	}}
	if err := a.serveGRPC(*f.host, e, health); err != nil {
		a.stop()
		return nil, err
	}
	log.Info("kvroute epp listening", "grpc", a.grpcLn.Addr().String(), "tls", *e.secure, "pool", *e.poolName,
		"failure_mode", *e.failureMode, "fallbacks", *e.fallbacks)
	return a, nil
}

// watchPool starts the InferencePool watcher (--pool-name): it adds and removes the pool's endpoints as
// workers and sets the picker's failure mode from the pool. Stop ends it through cancel and joins it
// through done.
func (a *eppApp) watchPool(e *eppFlags, kube kubeClients) error {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	dc, err := kube(*e.kubeconfig)
	if err != nil {
		return err
	}
	pc := k8spool.DefaultConfig()
	pc.Namespace, pc.Name = *e.poolNS, *e.poolName
	pc.Resource = schema.GroupVersionResource{Group: *e.poolGroup, Version: "v1", Resource: "inferencepools"}
	if strings.HasSuffix(*e.poolGroup, ".x-k8s.io") {
		pc.Resource.Version = "v1alpha2"
	}
	pc.EventsPort, pc.ReplayPort = *e.eventsPort, *e.replayPort
	if a.watcher, err = k8spool.NewWatcher(dc, a.router, pc, func(m string) {
		a.picker.SetFailureMode(epp.FailureMode(m))
	}); err != nil {
		return err
	}
	eppWatcher.Go(func() { defer close(a.done); a.watcher.Run(ctx) })
	return nil
}

// serveGRPC serves the ext-proc picker and gRPC health on --grpc-port (TLS with --secure-serving, client
// certificates with --client-ca-path), and health alone on --grpc-health-port when set.
func (a *eppApp) serveGRPC(host string, e *eppFlags, health *epp.Health) error {
	sc := a.server.Config()
	// A connection has --header-timeout to finish its TLS and HTTP/2 handshakes (grpc-go's default is
	// 120 s), and one connection carries at most --max-concurrent-requests streams, the bound the
	// picker also keeps over all of them. A stop waits for the streams' handlers, so that a cut stream
	// has freed its request when stop returns.
	opts := []grpc.ServerOption{grpc.ConnectionTimeout(sc.HeaderTimeout), grpc.MaxConcurrentStreams(uint32(sc.MaxConcurrent)),
		grpc.WaitForHandlers(true)}
	if *e.secure {
		tc, err := eppTLS(*e.certPath, *e.clientCA)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	a.grpc = grpc.NewServer(opts...)
	extproc.RegisterExternalProcessorServer(a.grpc, a.picker)
	healthpb.RegisterHealthServer(a.grpc, health)
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(*e.grpcPort)))
	if err != nil {
		return fmt.Errorf("--grpc-port: %w", err)
	}
	// At most --max-conns gateway connections (the HTTP edge's bound, filled from the open-file limit
	// when unset): one more is closed at once. grpc-go retries accept errors itself; each connection
	// otherwise costs its goroutines and HTTP/2 buffers for as long as its peer keeps it.
	a.grpcLn = netlimit.NewListener(ln, netlimit.ListenerConfig{MaxConns: sc.MaxConns})
	grpcServe.Go(func() { _ = a.grpc.Serve(a.grpcLn) })
	if *e.healthPort > 0 {
		a.health = grpc.NewServer()
		healthpb.RegisterHealthServer(a.health, health)
		if a.healthLn, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(*e.healthPort))); err != nil {
			return fmt.Errorf("--grpc-health-port: %w", err)
		}
		grpcServe.Go(func() { _ = a.health.Serve(a.healthLn) })
	}
	return nil
}

// The picker's goroutines: the pool watcher (joined through done), the gRPC servers (ended by stop) and
// the graceful stop that stop waits for, at most --graceful-shutdown-timeout, before forcing it.
var (
	eppWatcher   = routine.Named("epp.watcher")
	grpcServe    = routine.Named("epp.grpc-serve")
	gracefulStop = routine.Named("epp.graceful-stop")
)

// stop drains the picker as the frontend drains its HTTP edge (drainPicker), then ends the watcher and
// the frontend's core. It runs once; later calls wait for the first.
func (a *eppApp) stop() {
	a.stopOnce.Do(func() {
		a.drainPicker()
		if a.cancel != nil {
			a.cancel()
			<-a.done
		}
		a.frontendApp.stop()
	})
}

// drainPicker ends the gRPC servers without cutting a gateway's requests short: readiness turns
// NOT_SERVING (the gateway and the kubelet stop sending new requests here) while the port still serves
// new streams for up to --graceful-shutdown-grace-period, ending early once no stream is open; then the
// port closes and the open streams get --graceful-shutdown-timeout before they are cut (a cut stream
// frees its request, counted broken). The plain-text health port serves until the end.
func (a *eppApp) drainPicker() {
	if a.grpc == nil {
		return
	}
	a.probes.StartDrain()
	open := func() int64 { return a.picker.Stats().Streams }
	a.log.Info("shutdown: draining the picker", "streams", open(), "grace_period", a.drain.GracePeriod,
		"timeout", a.drain.Timeout)
	frontend.GraceWait(open, a.drain.GracePeriod, 20*time.Millisecond)
	timeout := a.drain.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	stopped := make(chan struct{})
	gracefulStop.Go(func() { a.grpc.GracefulStop(); close(stopped) })
	select {
	case <-stopped:
	case <-time.After(timeout):
		a.log.Warn("shutdown: picker drain timeout, streams cut", "streams", open())
		a.grpc.Stop()
		<-stopped
	}
	if a.health != nil {
		a.health.Stop()
	}
}

// eppTLS is --grpc-port's TLS: the serving certificate from certDir (servingCert) and, with caFile, a
// client certificate required and verified against the CAs it holds.
func eppTLS(certDir, caFile string) (*tls.Config, error) {
	cert, err := servingCert(certDir)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-path: %w", err)
	}
	tc.ClientCAs = x509.NewCertPool()
	if !tc.ClientCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--client-ca-path %s: no PEM certificate in it", caFile)
	}
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	return tc, nil
}

// servingCert loads dir/tls.crt and dir/tls.key, or makes a self-signed certificate when dir is empty
// (gateways that call a picker over TLS do not verify it by default).
func servingCert(dir string) (tls.Certificate, error) {
	if dir != "" {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("--cert-path: %w", err)
		}
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "kvroute-epp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// parseEPP parses kvroute epp's flags (the frontend's plus its own).
func parseEPP(args []string) (*frontendFlags, *eppFlags, *slog.Logger, int, bool) {
	var e *eppFlags
	f, log, code, ok := parseFrontend("epp", args, func(fs *flag.FlagSet) { e = addEPPFlags(fs) })
	if !ok {
		return nil, nil, nil, code, false
	}
	if err := e.check(); err != nil {
		fmt.Fprintf(errOut, "kvroute epp: %v\n", err)
		return nil, nil, nil, 2, false
	}
	return f, e, log, 0, true
}

func runEPP(args []string) int {
	f, e, log, code, ok := parseEPP(args)
	if !ok {
		return code
	}
	app, err := startEPP(f, e, realKubeClients, log)
	if err != nil {
		fatal(log, "epp", err)
		return 1
	}
	waitForSignal()
	log.Info("shutdown: signal received")
	app.stop()
	return 0
}
