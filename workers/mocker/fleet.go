package mocker

import (
	"errors"
	"fmt"
	"github.com/kvroute/kvroute/workers/kvevents"
	"net"
	"strconv"
	"strings"
	"sync"
)

// FleetConfig starts NumWorkers workers in one process, each from Template with its own id, HTTP port
// and event endpoints.
type FleetConfig struct {
	// NumWorkers is the number of simulated servers. Default 1.
	NumWorkers int
	// Template is copied for each worker. ID, HTTPAddr and KVEvents' endpoints are overwritten; keep
	// Template.KVEvents.Enable to publish events.
	Template WorkerConfig
	// FirstID is the id of worker 0; worker i gets FirstID+i. Default 0.
	FirstID int
	// HTTPHost is the listen host. Default "127.0.0.1".
	HTTPHost string
	// HTTPPortBase: worker i listens on HTTPPortBase+i; 0 picks free ports.
	HTTPPortBase int
	// KVEventsPortBase: worker i rank r publishes on tcp://*:KVEventsPortBase+i·DPSize+r (bound, as vLLM's
	// default endpoint); 0 binds tcp://127.0.0.1:* (a free port per rank, read back with EventsEndpoint).
	KVEventsPortBase int
	// ReplayPortBase: the replay ROUTER, numbered like KVEventsPortBase; 0 picks free ports. NoReplay
	// disables replay.
	ReplayPortBase int
	NoReplay       bool
}

// Fleet is a set of in-process workers.
type Fleet struct {
	Workers []*Worker
}

// StartFleet starts every worker or none.
func StartFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.NumWorkers <= 0 {
		cfg.NumWorkers = 1
	}
	if cfg.HTTPHost == "" {
		cfg.HTTPHost = "127.0.0.1"
	}
	dp := max(cfg.Template.DPSize, 1)
	// libzmq takes a port number modulo 65536 (70000 bound 4464): every port of a base must be one.
	for _, b := range []struct {
		name       string
		base, span int
	}{{"HTTP port base", cfg.HTTPPortBase, cfg.NumWorkers}, {"KV events port base", cfg.KVEventsPortBase, cfg.NumWorkers * dp},
		{"replay port base", cfg.ReplayPortBase, cfg.NumWorkers * dp}} {
		if b.base < 0 || b.base > 0 && b.base+b.span-1 > 65535 {
			return nil, fmt.Errorf("%w: %s %d: its %d ports must lie in 1..65535", ErrBadConfig, b.name, b.base, b.span)
		}
	}
	f := &Fleet{}
	for i := range cfg.NumWorkers {
		wc := cfg.Template
		wc.ID = cfg.FirstID + i
		port := 0
		if cfg.HTTPPortBase > 0 {
			port = cfg.HTTPPortBase + i
		}
		wc.HTTPAddr = net.JoinHostPort(cfg.HTTPHost, strconv.Itoa(port))
		wc.KVEvents.Endpoint = "tcp://127.0.0.1:*"
		if cfg.KVEventsPortBase > 0 {
			wc.KVEvents.Endpoint = "tcp://*:" + strconv.Itoa(cfg.KVEventsPortBase+i*dp)
		}
		switch {
		case cfg.NoReplay:
			wc.KVEvents.ReplayEndpoint = ""
		case cfg.ReplayPortBase > 0:
			wc.KVEvents.ReplayEndpoint = "tcp://*:" + strconv.Itoa(cfg.ReplayPortBase+i*dp)
		default:
			wc.KVEvents.ReplayEndpoint = "tcp://127.0.0.1:*"
		}
		w, err := StartWorker(wc)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("mocker: fleet worker %d: %w", i, err)
		}
		f.Workers = append(f.Workers, w)
	}
	return f, nil
}

// Close stops every worker, concurrently (an HTTP server takes up to ~100 ms to drain).
func (f *Fleet) Close() error {
	errs := make([]error, len(f.Workers))
	var wg sync.WaitGroup
	for i, w := range f.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Specs returns every worker's Spec, in order.
func (f *Fleet) Specs() []string {
	out := make([]string, len(f.Workers))
	for i, w := range f.Workers {
		out[i] = w.Spec()
	}
	return out
}

// Spec is the worker in the router's --worker form
// (id=…,url=…,events=…,replay=…,dp_size=…,model=…,block_size=…,total_kv_blocks=…,max_num_batched_tokens=…).
// With DPSize > 1 and free ports the ranks' endpoints are not base+rank: use fixed port bases then.
func (w *Worker) Spec() string {
	s := "id=" + strconv.Itoa(w.cfg.ID) + ",url=" + w.URL()
	if ep := w.EventsEndpoint(0); ep != "" {
		s += ",events=" + ep
	}
	if ep := w.ReplayEndpoint(0); ep != "" {
		s += ",replay=" + ep
	}
	if w.cfg.KVEvents.Enable && w.cfg.KVEvents.CurveSecretKey != "" {
		if pub, err := kvevents.CurvePublicKey(w.cfg.KVEvents.CurveSecretKey); err == nil {
			s += ",curve_key=" + pub
		}
	}
	if w.cfg.KVEvents.Enable && w.cfg.KVEvents.Topic != "" {
		s += ",topic=" + w.cfg.KVEvents.Topic
	}
	if len(w.ranks) > 1 {
		s += ",dp_size=" + strconv.Itoa(len(w.ranks))
	}
	if n := w.model.Name; n != "" && !strings.ContainsAny(n, ",= ") {
		s += ",model=" + n
	}
	e := w.cfg.Engine
	return s + ",block_size=" + strconv.Itoa(e.BlockSize) + ",total_kv_blocks=" + strconv.Itoa(e.NumGPUBlocks) +
		",max_num_batched_tokens=" + strconv.Itoa(e.MaxNumBatchedTokens)
}
