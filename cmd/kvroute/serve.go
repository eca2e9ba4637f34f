package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("serve", "the one-command demo: the frontend on :8000 with simulated workers in-process", runServe)
}

func runServe(args []string) int {
	var n, gpuBlocks *int
	var speedup *float64
	f, log, code, ok := parseFrontend("serve", args, func(fs *flag.FlagSet) {
		n = fs.Int("workers", 4, "simulated workers to start in-process")
		gpuBlocks = fs.Int("num-gpu-blocks", 4096, "KV capacity of each simulated worker, in blocks")
		speedup = fs.Float64("speedup-ratio", 10, "simulated time runs this many times faster than real time")
	})
	if !ok {
		return code
	}
	app, err := startServe(f, serveConfig{workers: *n, gpuBlocks: *gpuBlocks, speedup: *speedup}, newRegistry(), log)
	if err != nil {
		fatal(log, "serve", err)
		return 1
	}
	defer app.closeFleet()
	name := *f.modelName
	log.Info("kvroute serve ready", "workers", *n, "try", fmt.Sprintf(
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
}

// startServe starts the simulated workers in-process, then the frontend over them.
func startServe(f *frontendFlags, sc serveConfig, reg *prometheus.Registry, log *slog.Logger) (*frontendApp, error) {
	dir := *f.modelPath
	name := *f.modelName
	if name == "" {
		name = modelNameOf(dir)
		*f.modelName = name
	}
	wm, err := mocker.LoadModel(dir, name)
	if err != nil {
		return nil, err
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize = f.cfg.BlockSize
	tmpl.Engine.NumGPUBlocks = sc.gpuBlocks
	tmpl.Engine.SpeedupRatio = sc.speedup
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: sc.workers, Template: tmpl, FirstID: 1})
	if err != nil {
		return nil, err
	}
	for _, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			fleet.Close()
			return nil, err
		}
		f.workers = append(f.workers, sp)
	}
	app, err := startFrontend(f, reg, log)
	if err != nil {
		fleet.Close()
		return nil, err
	}
	app.fleet = fleet
	return app, nil
}
