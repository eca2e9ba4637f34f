package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/frontend"
	"github.com/kvroute/kvroute/internal/netlimit"
)

// serverFlags are the HTTP edge's limits and security flags, shared by frontend, serve and router.
type serverFlags struct {
	adminToken    *string
	routerToken   *string
	tlsCert       *string
	tlsKey        *string
	maxHeader     *int
	maxConc       *int
	connsPerIP    *int
	conns         *int
	writeTimeout  *time.Duration
	bodyInFlight  *int
	headerTimeout *time.Duration
	bodyTimeout   *time.Duration
	origins       *string
}

func (s *serverFlags) register(fs *flag.FlagSet) {
	s.adminToken = fs.String("admin-token", os.Getenv("KVROUTE_ADMIN_TOKEN"),
		"bearer token required to register or remove workers, change busy thresholds and read debug endpoints; unset, they answer loopback clients only (env KVROUTE_ADMIN_TOKEN)")
	s.routerToken = fs.String("router-api-token", os.Getenv("KVROUTE_ROUTER_API_TOKEN"),
		"bearer token required on /v1/route, /v1/route/{id}/... and /v1/overlap_scores (default: the admin token); with neither set they answer loopback clients only (env KVROUTE_ROUTER_API_TOKEN)")
	s.tlsCert = fs.String("tls-cert-path", os.Getenv("DYN_TLS_CERT_PATH"), "PEM certificate: serve HTTPS (with --tls-key-path) [$DYN_TLS_CERT_PATH]")
	s.tlsKey = fs.String("tls-key-path", os.Getenv("DYN_TLS_KEY_PATH"), "PEM private key for --tls-cert-path [$DYN_TLS_KEY_PATH]")
	alias(fs, "tls-cert", "tls-cert-path")
	alias(fs, "tls-key", "tls-key-path")
	s.maxHeader = fs.Int("max-header-bytes", 64<<10, "largest request line plus headers accepted (431 above)")
	s.maxConc = fs.Int("max-concurrent-requests", 16384, "requests in flight before new ones get 429: POST calls outside the admin plane, each until its last byte (a stream's included); probes, /metrics, reads and the admin API are not counted (kvroute epp: also its ext_proc streams, one past it ended RESOURCE_EXHAUSTED)")
	s.connsPerIP = fs.Int("max-conns-per-ip", 1024, "open connections per client address before new ones get 429 (raise it behind a proxy; negative disables)")
	s.conns = fs.Int("max-conns", 0, "client connections open at once, from all addresses: at it a new one takes the place of the one idle longest, or gets 503 when every one is in a request (0: a quarter of the open-file limit, the HTTP edge's share of the process's descriptors; negative disables)")
	s.bodyInFlight = fs.Int("max-body-bytes-in-flight", 256<<20, "bytes of request bodies being read at once, across all connections, before new bodies get 503")
	s.headerTimeout = fs.Duration("header-timeout", 10*time.Second, "deadline for a request's line and headers, from their first byte (kvroute epp: also a gRPC connection's TLS and HTTP/2 handshakes)")
	s.writeTimeout = fs.Duration("write-timeout", 60*time.Second, "deadline for a client to take each MiB of a response, a stream's included: a client that stops reading loses its connection and its request is freed (negative disables)")
	s.bodyTimeout = fs.Duration("body-timeout", 30*time.Second, "deadline for a request's body, from the end of its headers (also the keep-alive idle timeout)")
	s.origins = fs.String("allowed-origins", "", `browser origins allowed cross-origin calls (CORS), vLLM's JSON list or a comma list: '["*"]', 'https://a.example,https://b.example'; empty: no CORS`)
}

// check refuses half a TLS pair (Dynamo requires both paths, and serving plain HTTP when one was meant
// would be a silent downgrade) and a bound that is not positive where no other meaning is documented (the
// edge read 0 or -1 as its default: a bound asked for and silently not applied).
func (s *serverFlags) check() error {
	if (*s.tlsCert == "") != (*s.tlsKey == "") {
		return errors.New("--tls-cert-path and --tls-key-path go together: give both or neither")
	}
	for _, b := range []struct {
		name string
		v    int64
	}{{"max-header-bytes", int64(*s.maxHeader)}, {"max-concurrent-requests", int64(*s.maxConc)},
		{"max-body-bytes-in-flight", int64(*s.bodyInFlight)}, {"header-timeout", int64(*s.headerTimeout)},
		{"body-timeout", int64(*s.bodyTimeout)}} {
		if b.v <= 0 {
			return fmt.Errorf("--%s must be positive", b.name)
		}
	}
	if *s.connsPerIP == 0 {
		return errors.New("--max-conns-per-ip 0 would refuse every client: give a positive bound, or a negative value for none")
	}
	return nil
}

func (s *serverFlags) config(maxBody int, reg *prometheus.Registry) frontend.ServerConfig {
	cfg := frontend.ServerConfig{MaxBodyBytes: maxBody, AdminToken: *s.adminToken, RouterAPIToken: *s.routerToken,
		TLSCert: *s.tlsCert, TLSKey: *s.tlsKey, MaxHeaderBytes: *s.maxHeader, MaxConcurrent: *s.maxConc,
		MaxConnsPerIP: *s.connsPerIP, MaxConns: *s.conns, WriteTimeout: *s.writeTimeout, MaxBodyBytesInFlight: *s.bodyInFlight, HeaderTimeout: *s.headerTimeout,
		ReadTimeout: *s.bodyTimeout, AllowedOrigins: frontend.ParseOrigins(*s.origins)}
	if reg != nil {
		cfg.Gatherer, cfg.Registerer = reg, reg
	}
	return cfg
}

// logAccess says at startup who may call the admin plane and the router API, and how many client
// connections the edge holds (cfg: the server's, defaults filled).
func logAccess(log *slog.Logger, cfg frontend.ServerConfig) {
	admin, routerAPI := cfg.AccessSummary()
	log.Info("admin API (worker registration and removal, POST /busy_threshold, /debug/)", "access", admin)
	log.Info("router API (/v1/route, /v1/overlap_scores)", "access", routerAPI)
	log.Info("HTTP connections", "max_conns", cfg.MaxConns, "max_conns_per_ip", cfg.MaxConnsPerIP, "open_file_limit", netlimit.OpenFiles())
}

// identityCheckFlag registers --kv-events-identity-check, shared by frontend, serve and router.
func identityCheckFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("kv-events-identity-check", 30*time.Second,
		"how often each worker's event publisher is re-verified while connected (catches an engine restart a relay hid); negative disables")
}
