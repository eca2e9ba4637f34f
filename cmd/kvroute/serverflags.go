package main

import (
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
	s.tlsCert = fs.String("tls-cert", "", "PEM certificate: serve HTTPS (with --tls-key)")
	s.tlsKey = fs.String("tls-key", "", "PEM private key for --tls-cert")
	s.maxHeader = fs.Int("max-header-bytes", 64<<10, "largest request line plus headers accepted (431 above)")
	s.maxConc = fs.Int("max-concurrent-requests", 16384, "requests in flight before new ones get 429")
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
