package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/bench"
	"github.com/kvroute/kvroute/bench/lab"
)

// benchLab runs the deterministic fleet lab (bench/lab): every arm × arrival speedup on a virtual clock.
func benchLab(args []string) error {
	cfg := lab.DefaultConfig()
	fs := flag.NewFlagSet("bench lab", flag.ContinueOnError)
	c := commonFlags(fs, "lab")
	trace := fs.String("trace", "", "Mooncake JSONL trace (the workload unless --workload names a generator)")
	minutes := fs.Float64("minutes", 10, "use only the first N minutes of the trace (0: all)")
	workload := fs.String("workload", "trace", "trace, or a generated workload: "+strings.Join(lab.GenKinds, ", "))
	gen := lab.DefaultGenConfig("")
	fs.DurationVar(&gen.Duration, "gen-duration", gen.Duration, "generated workload: arrival span")
	fs.Float64Var(&gen.Rate, "gen-rate", gen.Rate, "generated workload: mean arrivals per second at arrival speedup 1")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated engines")
	modes := fs.String("modes", strings.Join(lab.ArmNames(), ","), "comma-separated arms: "+strings.Join(lab.ArmNames(), ", "))
	sweep := fs.String("sweep-arrival", "1", "comma-separated arrival speedups (trace time divided by each)")
	fs.StringVar(&cfg.Profile, "profile", cfg.Profile, "engine profile: "+strings.Join(lab.ProfileNames(), ", "))
	profileFile := fs.String("profile-file", "", "JSON engine profile (bench/lab.Profile); used as --profile")
	fs.DurationVar(&cfg.EventDelay, "event-delay", cfg.EventDelay, "KV event latency from a step's end to the index")
	fs.DurationVar(&cfg.MetricsInterval, "metrics-interval", cfg.MetricsInterval, "period of the engines' KV usage scrape")
	slos := fs.String("slos", "0.5,1,2,4", "comma-separated TTFT p90 bounds (s) of the goodput sweep")
	fs.Float64Var(&cfg.KneeSLO, "knee-slo", cfg.KneeSLO, "TTFT p90 bound (s) whose goodput knee is bisected (0: no bisection)")
	fs.IntVar(&cfg.KneeSteps, "knee-steps", cfg.KneeSteps, "bisection runs per arm")
	fs.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "simulations in flight (each is single-threaded)")
	fs.IntVar(&cfg.Blocks.BlockSize, "trace-block-size", cfg.Blocks.BlockSize, "tokens per trace hash id")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "engine and router KV block size in tokens")
	speed := fs.String("speed-change", "", "engine speed changes during a run, comma-separated AT:FACTOR (model time from the first arrival: 300s:0.5 halves every engine's speed from 5 minutes on)")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "length of the report's time windows (hit rate and TTFT p90 by arrival time), model time")
	fs.DurationVar(&cfg.CalibrationEvery, "calibration-every", cfg.CalibrationEvery, "period of the samples of the kvroute cost's learned calibration, model time")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the arms' random choices, the token blocks and generated workloads")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Blocks.Seed, gen.Seed = cfg.Seed, cfg.Seed
	cfg.Arms = nil
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Arms = append(cfg.Arms, m)
		}
	}
	var err error
	if cfg.ArrivalSpeedups, err = parseFloats(*sweep); err != nil {
		return fmt.Errorf("--sweep-arrival: %w", err)
	}
	if cfg.SLOs, err = parseFloats(*slos); err != nil {
		return fmt.Errorf("--slos: %w", err)
	}
	for _, f := range strings.Split(*speed, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		at, factor, ok := strings.Cut(f, ":")
		d, err := time.ParseDuration(at)
		v, err2 := strconv.ParseFloat(factor, 64)
		if !ok || err != nil || err2 != nil {
			return fmt.Errorf("--speed-change: bad AT:FACTOR %q", f)
		}
		cfg.SpeedChanges = append(cfg.SpeedChanges, lab.SpeedChange{At: d, Factor: v})
	}
	if *profileFile != "" {
		f, err := os.Open(*profileFile)
		if err != nil {
			return err
		}
		p, err := lab.ReadProfile(f)
		f.Close()
		if err != nil {
			return err
		}
		cfg.ExtraProfiles, cfg.Profile = append(cfg.ExtraProfiles, p), p.Name
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var t *bench.Trace
	name := *workload
	if name == "trace" {
		if t, err = loadTrace(*trace, *minutes); err != nil {
			return err
		}
		name = filepath.Base(*trace)
	} else {
		gen.Kind = name
		if t, cfg.Images, err = lab.GenerateImages(gen); err != nil {
			return err
		}
	}
	rep := bench.NewReport("lab", args)
	fmt.Fprintf(os.Stderr, "lab: %s, %d requests over %.0f s, %d images, %d workers, profile %s, arms %v, arrival speedups %v\n",
		name, len(t.Requests), t.Span().Seconds(), len(cfg.Images), cfg.Workers, cfg.Profile, cfg.Arms, cfg.ArrivalSpeedups)
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := lab.Run(context.Background(), cfg, name, t)
	stop()
	if err != nil {
		return err
	}
	rep.Duration = time.Since(start).Seconds()
	lab.FillReport(rep, res)
	if err := finish(rep, *c.out); err != nil {
		return err
	}
	// lab.json is the result alone: no wall-clock or machine field, so the same flags give the same bytes.
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*c.out, "lab.json"), append(js, '\n'), 0o644)
}
