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
	seeds := fs.String("seeds", "", "comma-separated seeds: the whole lab under each, summarized per arm and rate over them, every arm held against the best --peers arm seed by seed, and on hit rate against the best one that met the knee SLO (else the largest of --slos) (replaces --seed)")
	peers := fs.String("peers", strings.Join(lab.PeerArms, ","), "with --seeds: the arms the others are held against")
	suite := fs.String("suite", "", "run a suite of seed studies instead of one workload: "+lab.SuiteStanding+" (the trace, when --trace names one, and every generated workload on every profile at 8 and 32 workers; --workload, --profile, --workers, --sweep-arrival and --knee-slo are the suite's)")
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
	if *suite != "" {
		list := *seeds
		if list == "" {
			list = strconv.FormatUint(cfg.Seed, 10)
		}
		loads := map[string]lab.Workload{} // the trace is read once for all its cases
		return benchLabSuite(cfg, c, args, *suite, list, *peers, func(kind string) (lab.Workload, error) {
			if w, ok := loads[kind]; ok {
				return w, nil
			}
			w, err := labWorkload(kind, *trace, *minutes, gen)
			loads[kind] = w
			return w, err
		}, *trace != "")
	}
	load, err := labWorkload(*workload, *trace, *minutes, gen)
	if err != nil {
		return err
	}
	if *seeds != "" {
		return benchLabSeeds(cfg, c, args, *seeds, *peers, load)
	}
	name, t, images, err := load(cfg.Seed)
	if err != nil {
		return err
	}
	cfg.Images = images
	fmt.Fprintf(os.Stderr, "lab: %s, %d requests over %.0f s, %d images, %d workers, profile %s, arms %v, arrival speedups %v\n",
		name, len(t.Requests), t.Span().Seconds(), len(cfg.Images), cfg.Workers, cfg.Profile, cfg.Arms, cfg.ArrivalSpeedups)
	return labReport(c, args, func() (any, func(*bench.Report), error) {
		res, err := lab.Run(context.Background(), cfg, name, t)
		return res, func(rep *bench.Report) { lab.FillReport(rep, res) }, err
	})
}

// labReport times run (under the profiler flags), then writes its report and its lab.json.
func labReport(c benchCommon, args []string, run func() (any, func(*bench.Report), error)) error {
	rep := bench.NewReport("lab", args)
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	start := time.Now()
	v, fill, err := run()
	stop()
	if err != nil {
		return err
	}
	rep.Duration = time.Since(start).Seconds()
	fill(rep)
	if err := finish(rep, *c.out); err != nil {
		return err
	}
	return writeLabJSON(*c.out, v)
}

// writeLabJSON writes lab.json: the result alone, no wall-clock or machine field, so the same flags give
// the same bytes.
func writeLabJSON(dir string, v any) error {
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "lab.json"), append(js, '\n'), 0o644)
}

// labWorkload returns the lab's workload by seed: the trace (its first minutes, the same requests under
// every seed) or a generated workload drawn with the seed. A trace is read once.
func labWorkload(kind, trace string, minutes float64, gen lab.GenConfig) (lab.Workload, error) {
	if kind == "trace" {
		t, err := loadTrace(trace, minutes)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(trace)
		return func(uint64) (string, *bench.Trace, lab.Images, error) { return name, t, nil, nil }, nil
	}
	return func(seed uint64) (string, *bench.Trace, lab.Images, error) {
		g := gen
		g.Kind, g.Seed = kind, seed
		t, images, err := lab.GenerateImages(g)
		return kind, t, images, err
	}, nil
}

// benchLabSeeds runs the lab under every seed of list and reports the study (lab.SeedStudy).
func benchLabSeeds(cfg lab.Config, c benchCommon, args []string, list, peers string, load lab.Workload) error {
	seeds, ps, err := seedsAndPeers(list, peers)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lab: seeds %v, %d workers, profile %s, arms %v, arrival speedups %v, peers %v\n",
		seeds, cfg.Workers, cfg.Profile, cfg.Arms, cfg.ArrivalSpeedups, ps)
	return labReport(c, args, func() (any, func(*bench.Report), error) {
		st, err := lab.RunSeeds(context.Background(), cfg, seeds, ps, load)
		return st, func(rep *bench.Report) { lab.FillSeedReport(rep, st) }, err
	})
}

// seedsAndPeers parses --seeds and --peers.
func seedsAndPeers(list, peers string) ([]uint64, []string, error) {
	var seeds []uint64
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		s, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("--seeds: %q is not a seed", f)
		}
		seeds = append(seeds, s)
	}
	var ps []string
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := lab.LookupArm(p); err != nil {
				return nil, nil, fmt.Errorf("--peers: %w", err)
			}
			ps = append(ps, p)
		}
	}
	return seeds, ps, nil
}

// benchLabSuite runs the named suite (lab.StandingCases; the trace's cases only when withTrace) under
// every seed of list and reports it (lab.Suite).
func benchLabSuite(cfg lab.Config, c benchCommon, args []string, name, list, peers string,
	load func(string) (lab.Workload, error), withTrace bool) error {
	if name != lab.SuiteStanding {
		return fmt.Errorf("--suite: unknown suite %q (have %s)", name, lab.SuiteStanding)
	}
	seeds, ps, err := seedsAndPeers(list, peers)
	if err != nil {
		return err
	}
	cases := lab.StandingCases(withTrace)
	fmt.Fprintf(os.Stderr, "lab: suite %s, %d cases, seeds %v, arms %v, peers %v\n", name, len(cases), seeds, cfg.Arms, ps)
	return labReport(c, args, func() (any, func(*bench.Report), error) {
		s, err := lab.RunSuite(context.Background(), cfg, cases, seeds, ps, load)
		return s, func(rep *bench.Report) { lab.FillSuiteReport(rep, s) }, err
	})
}
