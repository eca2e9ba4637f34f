package main

import (
	"errors"
	"flag"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/frontend"
)

// serverFlags are the HTTP edge's limits and security flags, shared by frontend, serve and router.
type serverFlags struct {
	adminToken *string
	tlsCert    *string
	tlsKey     *string
	maxHeader  *int
	maxConc    *int
}

func (s *serverFlags) register(fs *flag.FlagSet) {
	s.adminToken = fs.String("admin-token", os.Getenv("KVROUTE_ADMIN_TOKEN"),
		"bearer token required to register or remove workers, change busy thresholds and read debug endpoints (env KVROUTE_ADMIN_TOKEN)")
	s.tlsCert = fs.String("tls-cert-path", os.Getenv("DYN_TLS_CERT_PATH"), "PEM certificate: serve HTTPS (with --tls-key-path) [$DYN_TLS_CERT_PATH]")
	s.tlsKey = fs.String("tls-key-path", os.Getenv("DYN_TLS_KEY_PATH"), "PEM private key for --tls-cert-path [$DYN_TLS_KEY_PATH]")
	alias(fs, "tls-cert", "tls-cert-path")
	alias(fs, "tls-key", "tls-key-path")
	s.maxHeader = fs.Int("max-header-bytes", 64<<10, "largest request line plus headers accepted (431 above)")
	s.maxConc = fs.Int("max-concurrent-requests", 16384, "requests in flight before new ones get 429")
}

// check refuses half a TLS pair: Dynamo requires both paths, and serving plain HTTP when one was meant
// would be a silent downgrade.
func (s *serverFlags) check() error {
	if (*s.tlsCert == "") != (*s.tlsKey == "") {
		return errors.New("--tls-cert-path and --tls-key-path go together: give both or neither")
	}
	return nil
}

func (s *serverFlags) config(maxBody int, reg *prometheus.Registry) frontend.ServerConfig {
	cfg := frontend.ServerConfig{MaxBodyBytes: maxBody, AdminToken: *s.adminToken, TLSCert: *s.tlsCert, TLSKey: *s.tlsKey,
		MaxHeaderBytes: *s.maxHeader, MaxConcurrent: *s.maxConc}
	if reg != nil {
		cfg.Gatherer = reg
	}
	return cfg
}

// identityCheckFlag registers --kv-events-identity-check, shared by frontend, serve and router.
func identityCheckFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("kv-events-identity-check", 30*time.Second,
		"how often each worker's event publisher is re-verified while connected (catches an engine restart a relay hid); negative disables")
}
