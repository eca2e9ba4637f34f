package natsplane

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an in-process NATS server with JetStream.
type ServerConfig struct {
	// Name is the server name (unique in a cluster). Default "kvroute".
	Name string
	// Host is the listen address of clients and routes. Default "127.0.0.1".
	Host string
	// Port is the client port; 0 picks a free one.
	Port int
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// ClusterName, ClusterPort and Routes make the server a cluster node (Routes lists every node's
	// route URL, itself included). Empty ClusterName: single node.
	ClusterName string
	ClusterPort int
	Routes      []string
	// ReadyTimeout bounds the wait for the server to accept clients. Default 10s.
	ReadyTimeout time.Duration
}

// StartServer starts an in-process NATS server with JetStream (`--nats-embedded`, and tests).
func StartServer(cfg ServerConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsplane: embedded server needs a store dir")
	}
	if cfg.Name == "" {
		cfg.Name = "kvroute"
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{ServerName: cfg.Name, Host: cfg.Host, Port: port, JetStream: true, StoreDir: cfg.StoreDir,
		NoSigs: true, NoLog: true}
	if cfg.ClusterName != "" {
		opts.Cluster = server.ClusterOpts{Name: cfg.ClusterName, Host: cfg.Host, Port: cfg.ClusterPort}
		for _, r := range cfg.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("natsplane: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsplane: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(cfg.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("natsplane: embedded server %s not ready within %v", cfg.Name, cfg.ReadyTimeout)
	}
	return s, nil
}

// Cluster is an in-process NATS cluster on 127.0.0.1 (tests and benchmarks). Node i keeps its client and
// route ports across Kill / Restart, so clients reconnect to it.
type Cluster struct {
	Nodes []*server.Server
	cfgs  []ServerConfig
}

// StartCluster starts n JetStream nodes whose stores live under dir, and waits until JetStream has a
// meta leader.
func StartCluster(n int, dir string) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := 0; i < n; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &Cluster{Nodes: make([]*server.Server, n)}
	for i := 0; i < n; i++ {
		c.cfgs = append(c.cfgs, ServerConfig{Name: fmt.Sprintf("n%d", i), Port: ports[i], StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			ClusterName: "kvroute", ClusterPort: ports[n+i], Routes: routes})
	}
	for i := range c.cfgs {
		if c.Nodes[i], err = StartServer(c.cfgs[i]); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.jetStreamReady() {
		if time.Now().After(deadline) {
			c.Shutdown()
			return nil, errors.New("natsplane: cluster JetStream not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

func (c *Cluster) jetStreamReady() bool {
	for _, s := range c.Nodes {
		if s == nil || !s.JetStreamIsCurrent() {
			return false
		}
	}
	for _, s := range c.Nodes {
		if s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// URL is the comma-separated client URL list of every node (what --nats-url takes).
func (c *Cluster) URL() string {
	var us []string
	for _, cfg := range c.cfgs {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", cfg.Port))
	}
	return strings.Join(us, ",")
}

// Kill shuts node i down (its store stays on disk).
func (c *Cluster) Kill(i int) {
	if c.Nodes[i] != nil {
		c.Nodes[i].Shutdown()
		c.Nodes[i].WaitForShutdown()
		c.Nodes[i] = nil
	}
}

// Restart starts node i again on its ports and store.
func (c *Cluster) Restart(i int) error {
	s, err := StartServer(c.cfgs[i])
	if err != nil {
		return err
	}
	c.Nodes[i] = s
	return nil
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// freePorts reserves n distinct free TCP ports on 127.0.0.1 (listen on :0, close). Another process may
// take one in between; tests accept that small race.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natsplane: free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
