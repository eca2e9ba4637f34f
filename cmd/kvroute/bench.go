package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/bench"
)

func init() {
	register("bench", "benchmarks: indexer (trace replay), route (decision latency), tokenizer, oracle, e2e, lab", runBench)
}

var benchCommands = map[string]struct {
	summary string
	run     func(args []string) error
}{
	"indexer":   {"Dynamo's indexer benchmark: a trace partitioned over N workers, events + overlap queries at trace time", benchIndexer},
	"route":     {"routing decision latency over workers × prompt length × indexed blocks", benchRoute},
	"tokenizer": {"tokens/s, warm and cold, of every fixture tokenizer", benchTokenizer},
	"oracle":    {"unbounded and pooled oracle hit rates of a trace", benchOracle},
	"e2e":       {"frontend + simulated workers in-process, every routing arm on one trace (TTFT, ITL, hit rate, goodput)", benchE2E},
	"lab":       {"deterministic fleet lab: simulated engines on a virtual clock, every arm × rate, goodput knee by bisection", benchLab},
}

// errUsage marks flag errors (exit 2, parseFlags has said what is wrong); errHelpShown marks help printed
// on request (exit 0).
var (
	errUsage     = errors.New("usage")
	errHelpShown = errors.New("help shown")
)

func runBench(args []string) int {
	if len(args) == 0 {
		benchUsage(os.Stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 {
			if sub, ok := benchCommands[args[1]]; ok {
				return benchExit(args[1], sub.run([]string{"--help"}))
			}
		}
		benchUsage(helpOut)
		return 0
	}
	sub, ok := benchCommands[args[0]]
	if !ok {
		names := make([]string, 0, len(benchCommands))
		for n := range benchCommands {
			names = append(names, n)
		}
		s := fmt.Sprintf("kvroute bench: unknown benchmark %q", args[0])
		if sug := suggest(args[0], names); sug != "" {
			s += fmt.Sprintf(" (did you mean %s?)", sug)
		}
		fmt.Fprintln(os.Stderr, s+"; see `kvroute bench --help`")
		return 2
	}
	return benchExit(args[0], sub.run(args[1:]))
}

func benchExit(name string, err error) int {
	if err != nil {
		if errors.Is(err, errHelpShown) {
			return 0
		}
		if errors.Is(err, errUsage) {
			return 2
		}
		fmt.Fprintf(os.Stderr, "kvroute bench %s: %v\n", name, err)
		return 1
	}
	return 0
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvroute bench <benchmark> [flags]\n\nbenchmarks:")
	names := make([]string, 0, len(benchCommands))
	for n := range benchCommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, benchCommands[n].summary)
	}
}

// benchCommon are the flags every bench shares.
type benchCommon struct {
	out          *string
	cpuprofile   *string
	blockprofile *string
}

func commonFlags(fs *flag.FlagSet, name string) benchCommon {
	return benchCommon{
		out:          fs.String("out", filepath.Join("out", "bench", name), "directory for report.json, report.md and the SVG plots"),
		cpuprofile:   fs.String("cpuprofile", "", "write a CPU profile of the measured part to this file"),
		blockprofile: fs.String("blockprofile", "", "write a blocking profile (lock and channel waits ≥ 1 µs) to this file"),
	}
}

func parse(fs *flag.FlagSet, args []string) error {
	if code, ok := parseFlags(fs, args, false); !ok {
		if code == 0 {
			return errHelpShown
		}
		return errUsage
	}
	return nil
}

// startProfile starts the CPU and blocking profiles asked for and returns their stop function.
func (c benchCommon) startProfile() (func(), error) {
	stops := []func(){}
	if *c.blockprofile != "" {
		runtime.SetBlockProfileRate(int(time.Microsecond))
		stops = append(stops, func() {
			runtime.SetBlockProfileRate(0)
			if f, err := os.Create(*c.blockprofile); err == nil {
				_ = pprof.Lookup("block").WriteTo(f, 0)
				f.Close()
			}
		})
	}
	if *c.cpuprofile != "" {
		f, err := os.Create(*c.cpuprofile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}

func finish(rep *bench.Report, out string) error {
	if err := rep.Write(out); err != nil {
		return err
	}
	for _, t := range rep.Tables {
		fmt.Print(bench.MarkdownTable(t))
		fmt.Println()
	}
	for _, n := range rep.Notes {
		fmt.Println("note:", n)
	}
	fmt.Printf("report: %s\n", filepath.Join(out, "report.md"))
	return nil
}

// sampleTrace is the trace that ships in the repository (testdata/traces/README.md): 60 conversations
// of the Mooncake conversation trace, all their turns, time compressed 15×, so the e2e bench runs on a
// fresh clone.
const sampleTrace = "testdata/traces/conversation-sample.jsonl"

func loadTrace(path string, minutes float64) (*bench.Trace, error) {
	if path == "" {
		return nil, fmt.Errorf("--trace is required")
	}
	t, err := bench.LoadTrace(path)
	if err != nil {
		if path == sampleTrace && errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s not found: run from the repository root or give --trace", path)
		}
		return nil, err
	}
	if minutes > 0 {
		t = t.FirstMinutes(time.Duration(minutes * float64(time.Minute)))
	}
	return t, nil
}

func benchIndexer(args []string) error {
	cfg := bench.DefaultIndexerConfig()
	fs := flag.NewFlagSet("bench indexer", flag.ContinueOnError)
	c := commonFlags(fs, "indexer")
	trace := fs.String("trace", "", "Mooncake JSONL trace (required)")
	minutes := fs.Float64("minutes", 0, "use only the first N minutes of the trace (0: all)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "synthetic workers the trace is partitioned over")
	fs.IntVar(&cfg.Duplicate, "duplicate", cfg.Duplicate, "replay every worker under this many ids (Dynamo -d)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "engine KV block size in tokens (divides --trace-block-size)")
	fs.IntVar(&cfg.Blocks.BlockSize, "trace-block-size", cfg.Blocks.BlockSize, "tokens per trace hash id")
	fs.IntVar(&cfg.CapacityBlocks, "capacity", cfg.CapacityBlocks, "KV capacity per worker in blocks (0: 262,144 tokens' worth)")
	fs.IntVar(&cfg.Shards, "shards", cfg.Shards, "indexer shards (--router-event-threads)")
	fs.DurationVar(&cfg.WarmEvery, "warm-every", cfg.WarmEvery, "how often the indexer reads what queries read of its live views, to keep their paths in the caches (--router-index-warm-secs; 0: never)")
	fs.IntVar(&cfg.Replayers, "replayers", cfg.Replayers, "goroutines replaying worker timelines")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the request → worker partition")
	fs.IntVar(&cfg.ColdMB, "cold-mb", cfg.ColdMB, "also report the cold floor: each request replayed 3 times after writing N MiB of other memory, fastest kept (0: skip)")
	fs.BoolVar(&cfg.Again, "again", cfg.Again, "also time every query a second time at once (the \"again\" column: the same read with its path in the cache)")
	fs.IntVar(&cfg.MaxBatchBlocks, "max-batch-blocks", cfg.MaxBatchBlocks, "split Stored events into events of at most N blocks, one Apply each (0: one event per request)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "wall time the trace is compressed into (0: as fast as possible)")
	sweep := fs.Bool("sweep", false, "sweep the offered rate: durations from --sweep-max down to --sweep-min, then an unpaced run (see --unpaced-runs)")
	sweepMax := fs.Duration("sweep-max", 20*time.Second, "longest sweep duration (lowest offered rate)")
	sweepMin := fs.Duration("sweep-min", 250*time.Millisecond, "shortest sweep duration (highest offered rate)")
	steps := fs.Int("sweep-steps", 6, "sweep steps")
	huge := hugePagesFlag(fs)
	stallProbe := fs.Duration("stall-probe", time.Second, "before and after the runs, spin one thread this long with nothing else running and report how often the host stopped it (gaps over 5 µs, 10 µs, 50 µs, 1 ms per second; 0: skip)")
	unpacedRuns := fs.Int("unpaced-runs", 3, "replays of an unpaced run (one replay lasts a second or two, and its rate moves by half between replays on a shared machine): the report's row is the replay with the median event blocks/s (the slower middle one of an even count), every replay's rate is in the notes")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *unpacedRuns < 1 {
		return fmt.Errorf("--unpaced-runs: %d, want at least 1", *unpacedRuns)
	}
	t, err := loadTrace(*trace, *minutes)
	if err != nil {
		return err
	}
	stopHuge, err := startHugePages(*huge, nil, false)
	if err != nil {
		return err
	}
	defer stopHuge()
	rep := bench.NewReport("indexer", args)
	fmt.Fprintf(os.Stderr, "preparing %d requests over %d × %d workers…\n", len(t.Requests), cfg.Workers, cfg.Duplicate)
	w, err := bench.PrepareIndexer(t, cfg)
	if err != nil {
		return err
	}
	var stalls []bench.HostStalls
	if *stallProbe > 0 {
		stalls = append(stalls, bench.MeasureStalls("before", *stallProbe))
	}
	durations := []time.Duration{cfg.Duration}
	if *sweep {
		durations = append(bench.SweepDurations(*sweepMax, *sweepMin, *steps), 0)
	}
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	runs, notes, err := replayDurations(w, durations, *unpacedRuns, (w.Queries+w.Events)*int64(cfg.Duplicate))
	stop()
	if err != nil {
		return err
	}
	rep.Notes = append(rep.Notes, notes...)
	if *stallProbe > 0 {
		stalls = append(stalls, bench.MeasureStalls("after", *stallProbe))
	}
	fmt.Fprintln(os.Stderr, "measuring a dependent load at 1 MiB, 32 MiB and the index's size…")
	bench.FillIndexerReport(rep, t, w, runs, bench.IndexMemoryLatencies(runs), stalls)
	rep.Notes = append(rep.Notes,
		"One op is one overlap query (the sharded indexer's Match, as the router reads it: overlaps in groups of worker slots; timed on the replaying goroutine) or one Stored/Removed event sent to the sharded indexer; blocks/s = query blocks + stored blocks per second (Dynamo's block throughput); event blocks/s = (stored + removed) blocks per second.",
		"Elapsed time ends after a Flush of every shard, so achieved rates include the write backlog.")
	rep.Notes = append(rep.Notes, hugePagesNotes(*huge)...)
	return finish(rep, *c.out)
}

// replayDurations replays w compressed into each of durations in turn (replayIndexer), and returns the
// runs with a note on each unpaced row made of several replays.
func replayDurations(w *bench.IndexerWorkload, durations []time.Duration, unpacedRuns int, ops int64) ([]*bench.IndexerRun, []string, error) {
	var runs []*bench.IndexerRun
	var notes []string
	for _, d := range durations {
		label := "unpaced"
		if d > 0 {
			label = d.String()
		}
		run, rates, err := replayIndexer(w, d, label, unpacedRuns, ops)
		if err != nil {
			return nil, nil, err
		}
		runs = append(runs, run)
		if len(rates) > 1 {
			notes = append(notes, fmt.Sprintf("The unpaced row is the median of %d replays by event blocks/s; each replay's: %s M/s.", len(rates), strings.Join(rates, ", ")))
		}
	}
	return runs, notes, nil
}

// replayIndexer replays w compressed into d (0: unpaced) and returns the run. An unpaced replay is made n
// times, each on a fresh indexer, and the one with the median event blocks/s (the slower middle one of an
// even count) is returned, with every replay's rate in M/s.
func replayIndexer(w *bench.IndexerWorkload, d time.Duration, label string, n int, ops int64) (*bench.IndexerRun, []string, error) {
	if d > 0 {
		n = 1
	}
	var reps []*bench.IndexerRun
	for i := range n {
		l := label
		if n > 1 {
			l = fmt.Sprintf("%s %d/%d", label, i+1, n)
		}
		p := bench.NewProgress(os.Stderr, "indexer "+l, ops)
		run, err := w.RunIndexer(d, p)
		p.Done()
		if err != nil {
			return nil, nil, err
		}
		reps = append(reps, run)
	}
	rates := make([]string, len(reps))
	for i, r := range reps {
		rates[i] = fmt.Sprintf("%.2f", r.EventBlocksPerSec/1e6)
	}
	slices.SortFunc(reps, func(a, b *bench.IndexerRun) int { return cmp.Compare(a.EventBlocksPerSec, b.EventBlocksPerSec) })
	return reps[(len(reps)-1)/2], rates, nil // the lower of the two middle replays when n is even
}

func benchOracle(args []string) error {
	fs := flag.NewFlagSet("bench oracle", flag.ContinueOnError)
	c := commonFlags(fs, "oracle")
	trace := fs.String("trace", "", "Mooncake JSONL trace (required)")
	minutes := fs.Float64("minutes", 0, "use only the first N minutes of the trace (0: all)")
	blocks := bench.DefaultBlocks()
	fs.IntVar(&blocks.BlockSize, "trace-block-size", blocks.BlockSize, "tokens per trace hash id")
	bs := fs.Int("block-size", 64, "engine KV block size in tokens")
	workers := fs.String("workers", "8", "comma-separated fleet sizes for the pooled oracle")
	capacity := fs.Int("capacity", 16384, "KV blocks per worker (pooled capacity = workers × capacity)")
	rate := fs.Float64("prefill-rate", bench.DefaultPrefillRate, "simulated routing: prefill tokens/s per worker")
	seed := fs.Uint64("seed", 42, "simulated routing: seed of the random policy")
	if err := parse(fs, args); err != nil {
		return err
	}
	t, err := loadTrace(*trace, *minutes)
	if err != nil {
		return err
	}
	rep := bench.NewReport("oracle", args)
	o := bench.Oracle{Blocks: blocks, BlockSize: *bs}
	u, err := o.UnboundedHitRate(t)
	if err != nil {
		return err
	}
	results := []bench.OracleResult{u}
	tab := bench.Table{Title: "Oracle hit rates", Columns: []string{"oracle", "workers", "capacity (blocks)", "token hit rate", "block hit rate"},
		Rows: [][]string{{"unbounded", "—", "∞", bench.Pct(u.HitRate), bench.Pct(u.BlockHitRate)}}}
	var labels []string
	var vals []float64
	labels, vals = append(labels, "unbounded"), append(vals, u.HitRate)
	var sims []bench.SimResult
	simTab := bench.Table{Title: "Simulated routing (per-worker LRUs, prefill backlog model)", Columns: []string{"workers", "policy", "hit rate", "of pooled", "imbalance (max/mean requests)", "wait p50 s", "wait p90 s", "wait p99 s"}}
	for _, ws := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(ws))
		if err != nil || n < 1 {
			return fmt.Errorf("--workers: bad fleet size %q", ws)
		}
		p, err := o.PooledHitRate(t, n**capacity)
		if err != nil {
			return err
		}
		results = append(results, p)
		tab.Rows = append(tab.Rows, []string{"pooled", strconv.Itoa(n), strconv.Itoa(n * *capacity), bench.Pct(p.HitRate), bench.Pct(p.BlockHitRate)})
		labels, vals = append(labels, fmt.Sprintf("pooled W=%d", n)), append(vals, p.HitRate)
		for _, pol := range bench.SimPolicies {
			r, err := o.SimulateRouting(t, n, *capacity, pol, *rate, *seed)
			if err != nil {
				return err
			}
			sims = append(sims, r)
			simTab.Rows = append(simTab.Rows, []string{strconv.Itoa(n), string(pol), bench.Pct(r.HitRate), bench.Pct(r.HitRate / p.HitRate),
				bench.F(r.Imbalance, 2), bench.F(r.WaitSeconds.P50, 2), bench.F(r.WaitSeconds.P90, 2), bench.F(r.WaitSeconds.P99, 2)})
		}
	}
	rep.Tables = append(rep.Tables, tab, simTab)
	rep.AddPlot("hit_rate.svg", "Oracle hit rates", (&bench.BarPlot{Title: "Oracle token hit rate", YLabel: "hit rate", Labels: labels, Values: vals, Max: 1}).SVG())
	rep.Data = map[string]any{"trace": t.Stats(), "block_size": *bs, "results": results, "simulated": sims, "prefill_rate": *rate}
	rep.Notes = append(rep.Notes, "Simulated routing has no engine: each worker prefills its uncached tokens at --prefill-rate, one request after another; wait = backlog at arrival + own prefill. cost = argmin(backlog + uncached/rate), the shape of kvroute's kv cost; prefix = pure affinity (longest cached prefix).")
	return finish(rep, *c.out)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "k"):
			f, mult = strings.TrimSuffix(f, "k"), 1<<10
		case strings.HasSuffix(f, "M"):
			f, mult = strings.TrimSuffix(f, "M"), 1<<20
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v*mult)
	}
	return out, nil
}

func benchRoute(args []string) error {
	cfg := bench.DefaultRouteConfig()
	fs := flag.NewFlagSet("bench route", flag.ContinueOnError)
	c := commonFlags(fs, "route")
	workers := fs.String("workers", "16,256,1024", "comma-separated worker counts")
	prompts := fs.String("prompt-tokens", "1024,8192,32768", "comma-separated prompt lengths in tokens")
	indexed := fs.String("indexed-blocks", "64k,1M", "comma-separated index sizes in blocks (k = 1024, M = 1048576)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "KV block size in tokens")
	fs.IntVar(&cfg.Decisions, "decisions", cfg.Decisions, "timed decisions per cell")
	fs.IntVar(&cfg.Shards, "shards", cfg.Shards, "indexer shards")
	fs.IntVar(&cfg.ActivePerWorker, "active", cfg.ActivePerWorker, "active requests per worker")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed")
	if err := parse(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Workers, err = parseInts(*workers); err != nil {
		return fmt.Errorf("--workers: %w", err)
	}
	if cfg.PromptTokens, err = parseInts(*prompts); err != nil {
		return fmt.Errorf("--prompt-tokens: %w", err)
	}
	if cfg.IndexedBlocks, err = parseInts(*indexed); err != nil {
		return fmt.Errorf("--indexed-blocks: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rep := bench.NewReport("route", args)
	cellsN := len(cfg.Workers) * len(cfg.PromptTokens) * len(cfg.IndexedBlocks)
	p := bench.NewProgress(os.Stderr, "route", int64(cellsN*cfg.Decisions))
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	var cells []*bench.RouteCell
	for _, n := range cfg.IndexedBlocks {
		for _, w := range cfg.Workers {
			for _, pt := range cfg.PromptTokens {
				cell, err := bench.RunRouteCell(cfg, w, pt, n, p)
				if err != nil {
					stop()
					p.Done()
					return err
				}
				cells = append(cells, cell)
			}
		}
	}
	stop()
	p.Done()
	bench.FillRouteReport(rep, cfg, cells)
	rep.Notes = append(rep.Notes, "One op is one whole routing decision of the production router (Router.Route, as BenchmarkRouteDecision): block hashing and the prefix chain, the overlap query on the sharded indexer (Match), then the scheduler step (candidates with load projection, selection in kv mode, AddRequest on the chosen worker). Stage means come from the router's own overhead histograms. The Free that keeps the fleet steady is not timed.",
		"Index: prompts of the cell's length (a quarter shared among 64 system prompts), each stored on one worker; queries are indexed prompts with a fresh last quarter.")
	return finish(rep, *c.out)
}

func benchTokenizer(args []string) error {
	cfg := bench.DefaultTokenizerConfig()
	fs := flag.NewFlagSet("bench tokenizer", flag.ContinueOnError)
	c := commonFlags(fs, "tokenizer")
	root := fs.String("root", ".", "repository root (fixtures are found under ROOT/testdata)")
	fixtures := fs.String("tokenizers", "", "comma-separated tokenizer.json paths (default: every fixture)")
	fs.StringVar(&cfg.Corpus, "corpus", "", "JSONL corpus of strings (default ROOT/testdata/tokenizers/corpus.jsonl)")
	fs.IntVar(&cfg.Bytes, "bytes", cfg.Bytes, "text size in bytes")
	fs.IntVar(&cfg.ColdRuns, "cold-runs", cfg.ColdRuns, "cold encodes (fresh tokenizer each) per tokenizer")
	fs.IntVar(&cfg.WarmRuns, "warm-runs", cfg.WarmRuns, "warm encodes per tokenizer")
	if err := parse(fs, args); err != nil {
		return err
	}
	if cfg.Corpus == "" {
		cfg.Corpus = filepath.Join(*root, "testdata", "tokenizers", "corpus.jsonl")
	}
	if *fixtures != "" {
		cfg.Fixtures = strings.Split(*fixtures, ",")
	} else {
		var err error
		if cfg.Fixtures, err = bench.FindTokenizers(*root); err != nil {
			return err
		}
	}
	text, err := bench.CorpusText(cfg.Corpus, cfg.Bytes)
	if err != nil {
		return err
	}
	rep := bench.NewReport("tokenizer", args)
	p := bench.NewProgress(os.Stderr, "tokenizer", int64(len(cfg.Fixtures)*(cfg.ColdRuns+cfg.WarmRuns)))
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	var results []*bench.TokenizerResult
	for _, path := range cfg.Fixtures {
		r, err := bench.RunTokenizer(path, text, cfg, p)
		if err != nil {
			stop()
			p.Done()
			return err
		}
		results = append(results, r)
	}
	stop()
	p.Done()
	bench.FillTokenizerReport(rep, cfg, results)
	rep.Notes = append(rep.Notes, "One op encodes the whole text on one goroutine. Cold = a freshly parsed tokenizer (empty word cache); warm = the same text again on the same tokenizer; medians of the runs.")
	return finish(rep, *c.out)
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("bad positive number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func benchE2E(args []string) error {
	cfg := bench.DefaultE2EConfig()
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	c := commonFlags(fs, "e2e")
	trace := fs.String("trace", sampleTrace, "Mooncake JSONL trace (default: the sample in the repository, 279 requests of 60 conversations)")
	minutes := fs.Float64("minutes", 10, "use only the first N minutes of the trace (0: all)")
	maxReq := fs.Int("max-requests", 0, "use only the first N requests (0: all)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "simulated workers")
	modes := fs.String("modes", strings.Join(bench.E2EArms, ","), "comma-separated arms: "+strings.Join(bench.E2EArms, ", ")+"; diagnostic: kv-scaleN (kv with --router-prefill-load-scale N); disaggregated fleets of the same size: disagg (half prefill, half decode, conditional prefill token_cap), disagg-all (every request disaggregated)")
	arrival := fs.Float64("arrival-speedup", 1, "divide trace time by this (ignored with --sweep-arrival)")
	sweep := fs.String("sweep-arrival", "", "comma-separated arrival speedups: repeat every arm at each and report goodput")
	fs.Float64Var(&cfg.SpeedupRatio, "speedup-ratio", cfg.SpeedupRatio, "mocker --speedup-ratio: divides simulated engine time")
	fs.IntVar(&cfg.Blocks.BlockSize, "trace-block-size", cfg.Blocks.BlockSize, "tokens per trace hash id")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "engine and router KV block size in tokens")
	fs.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", cfg.NumGPUBlocks, "KV blocks per worker")
	fs.DurationVar(&cfg.SLOTTFT, "slo-ttft", cfg.SLOTTFT, "TTFT p90 bound for goodput")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "after the last arrival, cancel what is still running after this long")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the router's random choices and the token blocks")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.Blocks.Seed = cfg.Seed
	cfg.Arms = nil
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Arms = append(cfg.Arms, m)
		}
	}
	cfg.ArrivalSpeedups = []float64{*arrival}
	if *sweep != "" {
		var err error
		if cfg.ArrivalSpeedups, err = parseFloats(*sweep); err != nil {
			return fmt.Errorf("--sweep-arrival: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	t, err := loadTrace(*trace, *minutes)
	if err != nil {
		return err
	}
	if *maxReq > 0 && *maxReq < len(t.Requests) {
		t = &bench.Trace{Requests: t.Requests[:*maxReq]}
	}
	rep := bench.NewReport("e2e", args)
	fmt.Fprintf(os.Stderr, "e2e: %d requests over %.0f s of trace, %d workers, arms %v, arrival speedups %v, speedup ratio %v\n",
		len(t.Requests), t.Span().Seconds(), cfg.Workers, cfg.Arms, cfg.ArrivalSpeedups, cfg.SpeedupRatio)
	stop, err := c.startProfile()
	if err != nil {
		return err
	}
	p := bench.NewProgress(os.Stderr, "e2e", 0)
	res, runs, err := bench.RunE2E(context.Background(), cfg, t, p)
	p.Done()
	stop()
	if err != nil {
		return err
	}
	bench.FillE2EReport(rep, res, runs)
	rep.Notes = append(rep.Notes,
		"Each arm runs on a fresh fleet, router and frontend, on the same arrivals; requests are token-id prompts on /v1/completions, streamed with usage. TTFT is from sending to the first data event with a token; ITL is each request's mean gap between tokens (AIPerf's per-request ITL); E2E is to the end of the stream.",
		"Engine hit rate = Σ cached_tokens / Σ prompt_tokens from the usage chunks; predicted = Σ x-kvroute-overlap-blocks × block size / Σ prompt tokens (0 for modes that do not query the index).",
		"Imbalance is the time average of max/mean in-flight requests per worker (counted on the client from the routing header to the end of the stream). Utilization is the engines' simulated busy time over workers × wall time. Replay lateness is how far behind schedule the replay fired at worst.",
		"Failed requests (cancelled at the drain timeout or erroring) count in TTFT with their time to failure (a lower bound) and are excluded from the other figures.")
	return finish(rep, *c.out)
}
