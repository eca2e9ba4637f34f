package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/mm"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("serve", "the one-command demo: the frontend on :8000 with simulated workers in-process", runServe)
}

func runServe(args []string) int {
	var n, gpuBlocks, prefill, decode *int
	var speedup *float64
	var keyEnv *string
	f, log, code, ok := parseFrontend("serve", args, func(fs *flag.FlagSet) {
		n = fs.Int("workers", 4, "simulated workers to start in-process")
		gpuBlocks = fs.Int("num-gpu-blocks", 4096, "KV capacity of each simulated worker, in blocks")
		speedup = fs.Float64("speedup-ratio", 10, "simulated time runs this many times faster than real time")
		prefill = fs.Int("prefill", 0, "disaggregated fleet: this many prefill workers (with --decode; replaces --workers for each model)")
		decode = fs.Int("decode", 0, "disaggregated fleet: this many decode workers (with --prefill; replaces --workers for each model)")
		keyEnv = fs.String("worker-api-key-env", "", "name of an environment variable holding an API key: the simulated workers require it (vLLM's --api-key) and the frontend sends it (worker spec api_key_env)")
	})
	if !ok {
		return code
	}
	if (*prefill > 0) != (*decode > 0) || *prefill < 0 || *decode < 0 {
		fmt.Fprintln(errOut, "kvroute serve: --prefill and --decode go together, both positive")
		return 2
	}
	sc := serveConfig{workers: *n, gpuBlocks: *gpuBlocks, speedup: *speedup, prefill: *prefill, decode: *decode}
	if err := sc.setKeyEnv(*keyEnv); err != nil {
		fmt.Fprintf(errOut, "kvroute serve: %v\n", err)
		return 2
	}
	app, err := startServe(f, sc, newRegistry(), log)
	if err != nil {
		fatal(log, "serve", err)
		return 1
	}
	defer app.closeFleet()
	name := app.name
	log.Info("kvroute serve ready", "workers", *n, "prefill", *prefill, "decode", *decode, "try", fmt.Sprintf(
		`curl -s localhost:%d/v1/chat/completions -H 'content-type: application/json' -d '{"model":"%s","messages":[{"role":"user","content":"Hello!"}]}'`,
		*f.port, name))
	waitForSignal()
	log.Info("shutdown: signal received")
	app.stop()
	return 0
}

// serveConfig is what kvroute serve adds to the frontend: its simulated fleet.
type serveConfig struct {
	workers, gpuBlocks int
	speedup            float64
	// apiKey, when set, makes every simulated worker require it (vLLM's --api-key); the frontend reads
	// it from the environment variable apiKeyEnv (the worker spec's api_key_env).
	apiKey, apiKeyEnv string
	// prefill and decode, when set, replace each model's workers with a disaggregated fleet:
	// prefill workers first (role=prefill), then decode workers (role=decode).
	prefill, decode int
}

// setKeyEnv is --worker-api-key-env: the simulated workers require the key the variable holds, and the
// frontend reads it from there (api_key_env). "" leaves the workers open.
func (c *serveConfig) setKeyEnv(name string) error {
	if name == "" {
		return nil
	}
	c.apiKey, c.apiKeyEnv = os.Getenv(name), name
	if c.apiKey == "" {
		return fmt.Errorf("--worker-api-key-env: $%s is empty", name)
	}
	return nil
}

// startServe starts the simulated workers in-process (sc.workers per model, each model's fleet with
// its tokenizer, block size and name), then the frontend over them.
func startServe(f *frontendFlags, sc serveConfig, reg *prometheus.Registry, log *slog.Logger) (*frontendApp, error) {
	if len(f.models) == 0 && *f.modelName == "" {
		*f.modelName = modelNameOf(*f.modelPath)
	}
	var fleets []*mocker.Fleet
	closeAll := func() {
		for _, fl := range fleets {
			fl.Close()
		}
	}
	next := 1
	for _, a := range f.modelArgs() {
		name := a.name
		if name == "" {
			name = modelNameOf(a.path)
		}
		wm, err := mocker.LoadModel(a.path, name)
		if err != nil {
			closeAll()
			return nil, err
		}
		tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
		tmpl.Engine.BlockSize = f.cfg.BlockSize
		if a.blockSize > 0 {
			tmpl.Engine.BlockSize = a.blockSize
		}
		tmpl.Engine.NumGPUBlocks = sc.gpuBlocks
		tmpl.Engine.SpeedupRatio = sc.speedup
		tmpl.APIKey = sc.apiKey
		// The simulated workers fetch images through the same guard as the frontend, and in one process
		// with one --media-allow-hosts: an image the frontend lets through, its worker may fetch too.
		tmpl.MediaAllowHosts = mm.ParseAllowHosts(*f.allow)
		groups := []struct {
			n    int
			role string
		}{{sc.workers, ""}}
		if sc.prefill > 0 {
			groups = groups[:0]
			groups = append(groups, struct {
				n    int
				role string
			}{sc.prefill, registry.RolePrefill}, struct {
				n    int
				role string
			}{sc.decode, registry.RoleDecode})
		}
		for _, g := range groups {
			fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: g.n, Template: tmpl, FirstID: next})
			if err != nil {
				closeAll()
				return nil, err
			}
			fleets = append(fleets, fleet)
			next += g.n
			for _, s := range fleet.Specs() {
				sp, err := registry.Parse(s)
				if err != nil {
					closeAll()
					return nil, err
				}
				sp.Model = name
				sp.APIKeyEnv = sc.apiKeyEnv
				sp.Role = g.role
				f.workers = append(f.workers, sp)
			}
		}
	}
	app, err := startFrontend(f, reg, log)
	if err != nil {
		closeAll()
		return nil, err
	}
	app.fleets = fleets
	return app, nil
}
