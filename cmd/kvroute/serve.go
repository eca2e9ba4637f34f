package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/workers/mocker"
	"github.com/kvroute/kvroute/workers/registry"
)

func init() {
	register("serve", "the one-command demo: the frontend on :8000 with simulated workers in-process", runServe)
}

func runServe(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f, err := addFrontendFlags(fs, scoring.ModeKV)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 2
	}
	n := fs.Int("workers", 4, "simulated workers to start in-process")
	gpuBlocks := fs.Int("num-gpu-blocks", 4096, "KV capacity of each simulated worker, in blocks")
	speedup := fs.Float64("speedup-ratio", 10, "simulated time runs this many times faster than real time")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	dir := *f.modelPath
	name := *f.modelName
	if name == "" {
		name = modelNameOf(dir)
		*f.modelName = name
	}
	wm, err := mocker.LoadModel(dir, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	tmpl := mocker.WorkerConfig{Engine: mocker.DefaultEngineConfig(), Model: wm, KVEvents: mocker.DefaultKVEventsConfig()}
	tmpl.Engine.BlockSize = f.cfg.BlockSize
	tmpl.Engine.NumGPUBlocks = *gpuBlocks
	tmpl.Engine.SpeedupRatio = *speedup
	fleet, err := mocker.StartFleet(mocker.FleetConfig{NumWorkers: *n, Template: tmpl, FirstID: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	defer fleet.Close()
	for _, s := range fleet.Specs() {
		sp, err := registry.Parse(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			return 1
		}
		f.workers = append(f.workers, sp)
	}
	app, err := startFrontend(f, newRegistry(), log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	log.Info("kvroute serve ready", "workers", *n, "try", fmt.Sprintf(
		`curl -s localhost:%d/v1/chat/completions -H 'content-type: application/json' -d '{"model":"%s","messages":[{"role":"user","content":"Hello!"}]}'`,
		*f.port, name))
	waitForSignal()
	app.stop()
	return 0
}
