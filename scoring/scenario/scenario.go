package scenario

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/policy"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/sched"
)

// Index is the prefix index the runner drives. *prefix.Index satisfies it; an actor-backed index can be
// plugged in through the same methods.
type Index interface {
	Store(w prefix.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) error
	Remove(w prefix.WorkerKey, engineHashes []uint64) error
	StoreTier(w prefix.WorkerKey, t prefix.Tier, parent uint64, hasParent bool, blocks []prefix.Block) error
	RemoveTier(w prefix.WorkerKey, t prefix.Tier, engineHashes []uint64) error
	ClearWorker(workerID uint64)
	RemoveWorker(workerID uint64)
	FindMatches(local []uint64, out []prefix.Score) []prefix.Score
}

var _ Index = (*prefix.Index)(nil)

// engineSalt makes the simulated engine's block hashes differ from the router's chain keys, as real
// engines' do (they salt and digest), so the runner exercises the re-keying path.
const engineSalt = 0x5eed_e791_0e57_ab1e

// epoch is the fake clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Runner executes one scenario script against the production scheduler machine (scoring/sched) and a
// prefix index; every command appends its result to the transcript.
type Runner struct {
	newIndex func() Index
	// dir is where config's policy=FILE is read from (the scripts' directory).
	dir string
	// classes is set when a policy document is loaded: transcripts then name each queued request's class.
	classes bool

	cfg   scoring.Config
	now   time.Time
	index Index
	m     *sched.Machine

	lastWorker *scoring.WorkerKey
	lastErr    error
	lastQueued bool

	out      *strings.Builder
	failures []string
	line     int
}

// machineIndex is the machine's view of the runner's index: the blocks the machine predicts
// (approximate mode) are written there, and each write is printed.
type machineIndex struct{ r *Runner }

func (x machineIndex) FindMatches(local []uint64, out []prefix.Score) []prefix.Score {
	return x.r.index.FindMatches(local, out)
}

func (x machineIndex) Store(w scoring.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) {
	if err := x.r.index.Store(prefix.WorkerKey(w), parent, hasParent, blocks); err != nil {
		x.r.printf("   approx store: %v", err)
	}
}

func (x machineIndex) Remove(w scoring.WorkerKey, hashes []uint64) {
	_ = x.r.index.Remove(prefix.WorkerKey(w), hashes)
	x.r.printf("   index: %d predicted blocks dropped from %s", len(hashes), name(w))
}

// New returns a runner whose index comes from newIndex (called again by each config command).
func New(newIndex func() Index) *Runner { return NewIn(newIndex, ".") }

// NewIn is New with the directory that config's policy=FILE names files in.
func NewIn(newIndex func() Index, dir string) *Runner {
	r := &Runner{newIndex: newIndex, dir: dir, out: &strings.Builder{}}
	if err := r.configure(nil); err != nil {
		panic(err)
	}
	return r
}

// Run executes a script and returns the transcript and the failed expectations.
func (r *Runner) Run(script io.Reader) (string, []string, error) {
	sc := bufio.NewScanner(script)
	for sc.Scan() {
		r.line++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			r.out.WriteString(sc.Text() + "\n")
			continue
		}
		r.out.WriteString("> " + line + "\n")
		if err := r.exec(line); err != nil {
			return r.out.String(), r.failures, fmt.Errorf("line %d: %q: %w", r.line, line, err)
		}
	}
	return r.out.String(), r.failures, sc.Err()
}

func (r *Runner) printf(format string, a ...any) {
	fmt.Fprintf(r.out, "  "+format+"\n", a...)
}

func parseArgs(fields []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return pos, kv
}

func (r *Runner) exec(line string) error {
	fields := strings.Fields(line)
	pos, args := parseArgs(fields[1:])
	switch fields[0] {
	case "config":
		return r.configure(fields[1:])
	case "add-worker":
		return r.addWorker(args)
	case "remove-worker":
		return r.removeWorker(args)
	case "set-worker":
		return r.setWorker(args)
	case "unhealthy", "healthy":
		return r.setHealthy(fields[0] == "healthy", args)
	case "kv-event":
		return r.kvEvent(pos, args)
	case "route":
		if n, ok := args["n"]; ok {
			return r.routeN(n, args)
		}
		return r.route(args)
	case "cancel":
		r.printf("%s cancelled: %v", args["id"], r.m.Cancel(args["id"]))
		return nil
	case "sample":
		return r.sample(args)
	case "prefill-done", "free", "output":
		return r.lifecycle(fields[0], args)
	case "tick":
		return r.tick(pos)
	case "load":
		r.printLoad()
		return nil
	case "queues":
		r.printQueues()
		return nil
	case "expect":
		return r.expect(pos, args)
	}
	return fmt.Errorf("unknown command %q", fields[0])
}

// configure resets all state. Keys are router flag names (scoring.Flags), DYN_* environment variables,
// seed=N, and policy=FILE: a router policy document (scoring/policy) in the scripts' directory, whose
// root profile the machine queues by.
func (r *Runner) configure(kvs []string) error {
	cfg := scoring.DefaultConfig()
	cfg.Mode = scoring.ModeKV
	cfg.BlockSize = 4
	// Scripts test Dynamo's cost unless they name another preset: the goldens are Dynamo's behaviour.
	cfg.Preset = scoring.PresetDynamo
	seed := uint64(1)
	var flags []string
	env := map[string]string{}
	var profile *policy.Profile
	for _, kv := range kvs {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "DYN_") {
			env[k] = v
			continue
		}
		if v, ok := strings.CutPrefix(kv, "policy="); ok {
			pc, err := policy.Load(filepath.Join(r.dir, v))
			if err != nil {
				return err
			}
			if profile = pc.Profile(""); profile == nil {
				return fmt.Errorf("%s has no root profile", v)
			}
			continue
		}
		if v, ok := strings.CutPrefix(kv, "seed="); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return err
			}
			seed = n
			continue
		}
		flags = append(flags, "--"+kv)
	}
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := scoring.RegisterFlagsEnv(fs, &cfg, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return err
	}
	if err := fs.Parse(flags); err != nil {
		return err
	}
	*r = Runner{newIndex: r.newIndex, dir: r.dir, classes: profile != nil, out: r.out, failures: r.failures, line: r.line,
		now: epoch, index: r.newIndex()}
	m, err := sched.New(cfg, machineIndex{r}, sched.Options{Seed: &seed, Start: epoch, Policy: profile})
	if err != nil {
		return err
	}
	r.m, r.cfg = m, *m.Config()
	return nil
}

func atoi(args map[string]string, k string, def int) (int, error) {
	v, ok := args[k]
	if !ok {
		return def, nil
	}
	return strconv.Atoi(v)
}

func workerKey(args map[string]string, idKey string) (scoring.WorkerKey, error) {
	id, err := atoi(args, idKey, -1)
	if err != nil || id < 0 {
		return scoring.WorkerKey{}, fmt.Errorf("%s= missing or bad", idKey)
	}
	dp, err := atoi(args, "dp", 0)
	if err != nil {
		return scoring.WorkerKey{}, err
	}
	return scoring.WorkerKey{WorkerID: uint64(id), DPRank: uint32(dp)}, nil
}

// addWorker: add-worker id=N [dp-size=R] [device=cpu] [total-kv-blocks=N] [max-batched=N] [kv-used=N].
func (r *Runner) addWorker(args map[string]string) error {
	id, err := atoi(args, "id", -1)
	if err != nil || id < 0 {
		return errors.New("id= missing or bad")
	}
	w := sched.Worker{ID: uint64(id)}
	for _, f := range []struct {
		k string
		p *int
	}{{"dp-size", &w.DPRanks}, {"total-kv-blocks", &w.TotalKVBlocks}, {"max-batched", &w.MaxNumBatchedTokens}} {
		if *f.p, err = atoi(args, f.k, 0); err != nil {
			return err
		}
	}
	if args["device"] == "cpu" {
		w.Device = scoring.DeviceCPU
	}
	r.released(r.m.AddWorker(r.now, w))
	return r.setUsage(uint64(id), max(w.DPRanks, 1), args)
}

// setUsage applies kv-used=N (the worker's own KV usage report) to every rank of worker id.
func (r *Runner) setUsage(id uint64, ranks int, args map[string]string) error {
	v, ok := args["kv-used"]
	if !ok {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return err
	}
	for rank := range ranks {
		r.m.SetKVUsage(scoring.WorkerKey{WorkerID: id, DPRank: uint32(rank)}, n)
	}
	return nil
}

// setWorker: set-worker id=N [kv-used=N] [total-kv-blocks=N] [max-batched=N] — what a worker reports.
func (r *Runner) setWorker(args map[string]string) error {
	k, err := workerKey(args, "id")
	if err != nil {
		return err
	}
	total, err := atoi(args, "total-kv-blocks", 0)
	if err != nil {
		return err
	}
	batched, err := atoi(args, "max-batched", 0)
	if err != nil {
		return err
	}
	r.m.SetCapacity(k.WorkerID, total, batched)
	if v, ok := args["kv-used"]; ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return err
		}
		r.m.SetKVUsage(k, n)
	}
	return nil
}

func (r *Runner) setHealthy(healthy bool, args map[string]string) error {
	id, err := atoi(args, "id", -1)
	if err != nil || id < 0 {
		return errors.New("id= missing")
	}
	_, rel := r.m.SetHealthy(r.now, uint64(id), healthy)
	r.released(rel)
	return nil
}

func (r *Runner) removeWorker(args map[string]string) error {
	id, err := atoi(args, "id", -1)
	if err != nil || id < 0 {
		return errors.New("id= missing")
	}
	r.index.RemoveWorker(uint64(id))
	r.released(r.m.RemoveWorker(r.now, uint64(id)))
	return nil
}

// parseTokens reads "1..8,20,30..31".
func parseTokens(s string) ([]uint32, error) {
	var out []uint32
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "..")
		a, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 32); err != nil {
				return nil, err
			}
		}
		for t := a; t <= b; t++ {
			out = append(out, uint32(t))
		}
	}
	return out, nil
}

func (r *Runner) hashes(tokens []uint32) (local, seq []uint64) {
	local = scoring.LocalBlockHashes(nil, tokens, r.cfg.BlockSize, scoring.Seed, nil)
	return local, scoring.SequenceHashes(nil, local)
}

// kvEvent: kv-event worker=ID [dp=N] store|remove tokens=... [from=BLOCK] [medium=CPU|DISK] | clear. The
// medium puts the blocks on a lower storage tier (scoring.ParseMedium, as the worker actor does). Store and remove act on
// the blocks of tokens from block index `from` on; a store with from > 0 names block from−1 as parent.
// Events go to the index directly, as the worker actor applies them.
func (r *Runner) kvEvent(pos []string, args map[string]string) error {
	k, err := workerKey(args, "worker")
	if err != nil {
		return err
	}
	pk := prefix.WorkerKey(k)
	if len(pos) != 1 {
		return errors.New("kv-event needs one of store, remove, clear")
	}
	if pos[0] == "clear" {
		r.index.ClearWorker(k.WorkerID)
		r.printf("cleared worker %d", k.WorkerID)
		return nil
	}
	tokens, err := parseTokens(args["tokens"])
	if err != nil {
		return err
	}
	from, err := atoi(args, "from", 0)
	if err != nil {
		return err
	}
	tier := prefix.TierDevice
	switch scoring.ParseMedium(args["medium"]) {
	case scoring.MediumHostPinned:
		tier = prefix.TierHost
	case scoring.MediumDisk, scoring.MediumExternal:
		tier = prefix.TierDisk
	case scoring.MediumDevice:
	default:
		return fmt.Errorf("unknown medium %q", args["medium"])
	}
	local, seq := r.hashes(tokens)
	if from > len(local) {
		return fmt.Errorf("from=%d beyond %d blocks", from, len(local))
	}
	switch pos[0] {
	case "store":
		blocks := make([]prefix.Block, 0, len(local)-from)
		for i := from; i < len(local); i++ {
			blocks = append(blocks, prefix.Block{EngineHash: seq[i] ^ engineSalt, LocalHash: local[i]})
		}
		var parent uint64
		if from > 0 {
			parent = seq[from-1] ^ engineSalt
		}
		err = r.index.StoreTier(pk, tier, parent, from > 0, blocks)
		r.printf("stored %d blocks on %s (%v): %s", len(blocks), name(k), tier, errText(err))
	case "remove":
		// Leaf first, as an engine evicts: removing a parent first would cascade its children out.
		eh := make([]uint64, 0, len(local)-from)
		for i := len(local) - 1; i >= from; i-- {
			eh = append(eh, seq[i]^engineSalt)
		}
		err = r.index.RemoveTier(pk, tier, eh)
		r.printf("removed %d blocks on %s (%v): %s", len(eh), name(k), tier, errText(err))
	default:
		return fmt.Errorf("unknown kv-event %q", pos[0])
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func name(k scoring.WorkerKey) string { return fmt.Sprintf("w%d/%d", k.WorkerID, k.DPRank) }

// parseRoute reads a route command into a machine request:
//
//	route id=ID tokens=SPEC [pin=N [pin-rank=R]] [priority=S] [strict=T] [osl=N] [session=S] [class=C]
//	      [credit=X] [scale=X] [temperature=X] [weight=X] [reuse=B] [track-prefill=B] [exclude=N,M]
func (r *Runner) parseRoute(args map[string]string) (*sched.Request, error) {
	tokens, err := parseTokens(args["tokens"])
	if err != nil {
		return nil, err
	}
	req := &sched.Request{ID: args["id"], ISL: len(tokens), ReturnCosts: true, Session: args["session"],
		PolicyClass: args["class"]}
	req.Local, _ = r.hashes(tokens)
	if _, ok := args["pin"]; ok {
		pin := map[string]string{"pin": args["pin"]}
		if v, ok := args["pin-rank"]; ok {
			pin["dp"] = v
		}
		k, err := workerKey(pin, "pin")
		if err != nil {
			return nil, err
		}
		req.Pin, req.PinRank = &k, len(pin) == 2
	}
	if v, ok := args["exclude"]; ok {
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, err
			}
			req.Exclude = append(req.Exclude, n)
		}
	}
	ov := &scoring.Override{}
	any := false
	for _, f := range []struct {
		k string
		p **float64
	}{{"credit", &ov.OverlapScoreCredit}, {"scale", &ov.PrefillLoadScale}, {"temperature", &ov.Temperature}, {"weight", &ov.OverlapScoreWeight}} {
		if v, ok := args[f.k]; ok {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			*f.p, any = &x, true
		}
	}
	for _, f := range []struct {
		k string
		p **bool
	}{{"reuse", &ov.AssumeKVReuse}, {"track-prefill", &ov.TrackPrefillTokens}} {
		if v, ok := args[f.k]; ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, err
			}
			*f.p, any = &b, true
		}
	}
	if any {
		req.Override = ov
	}
	if req.OSL, err = atoi(args, "osl", 0); err != nil {
		return nil, err
	}
	if v, ok := args["priority"]; ok {
		if req.Priority, err = strconv.ParseFloat(v, 64); err != nil {
			return nil, err
		}
	}
	strict, err := atoi(args, "strict", 0)
	req.Strict = uint32(strict)
	return req, err
}

func (r *Runner) route(args map[string]string) error {
	if args["id"] == "" {
		return errors.New("route needs id=")
	}
	req, err := r.parseRoute(args)
	if err != nil {
		return err
	}
	r.lastWorker, r.lastErr, r.lastQueued = nil, nil, false
	d, queued, err := r.m.Route(r.now, req)
	switch {
	case queued && r.classes:
		r.lastQueued = true
		c, _ := r.m.Class(req.ID)
		r.printf("%s queued in %s (%d waiting)", req.ID, c, r.m.Waiting())
	case queued:
		r.lastQueued = true
		r.printf("%s queued (%d waiting)", req.ID, r.m.Waiting())
	case err != nil:
		r.lastErr = err
		r.printf("%s error: %v", req.ID, err)
	default:
		r.printDecision(d)
	}
	return nil
}

// printDecision prints a decision and every candidate's overlap and cost.
func (r *Runner) printDecision(d sched.Decision) {
	k := d.Worker
	r.lastWorker = &k
	r.printf("%s -> %s overlap=%d cost=%s", d.ID, name(d.Worker), d.OverlapBlocks, fmtF(d.Cost))
	var costs []string
	for _, c := range d.Candidates {
		s := fmt.Sprintf("%s:%d/%s", name(c.Worker), c.Overlap, fmtF(c.Cost))
		if c.Busy {
			s += "(busy)"
		}
		costs = append(costs, s)
	}
	if len(costs) > 0 {
		r.printf("   costs %s", strings.Join(costs, " "))
	}
}

// released prints the requests a call released from waiting, in release order.
func (r *Runner) released(rel []sched.Released) {
	for _, x := range rel {
		if x.Err != nil {
			r.lastErr = x.Err
			r.printf("release %s after %v: error: %v", x.ID, x.Queued, x.Err)
			continue
		}
		r.printf("release %s after %v", x.ID, x.Queued)
		r.printDecision(x.Decision)
	}
}

// routeN routes n copies of a request with ids ID-0 … ID-(n−1).
func (r *Runner) routeN(n string, args map[string]string) error {
	count, err := strconv.Atoi(n)
	if err != nil {
		return err
	}
	base := args["id"]
	for i := range count {
		a := maps.Clone(args)
		a["id"] = base + "-" + strconv.Itoa(i)
		if err := r.route(a); err != nil {
			return err
		}
	}
	return nil
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// sample asks the machine for n dry decisions (Query: nothing is charged) and prints how often each
// worker wins: for temperature and the random modes.
func (r *Runner) sample(args map[string]string) error {
	n, err := atoi(args, "n", 1000)
	if err != nil {
		return err
	}
	req, err := r.parseRoute(args)
	if err != nil {
		return err
	}
	req.ReturnCosts = false
	hits := map[scoring.WorkerKey]int{}
	var order []scoring.WorkerKey
	for _, t := range r.m.Loads(nil) {
		order = append(order, t.Worker)
	}
	for range n {
		d, err := r.m.Query(r.now, req)
		if err != nil {
			r.printf("error: %v", err)
			return nil
		}
		hits[d.Worker]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s=%d", name(k), hits[k]))
	}
	r.printf("%d draws: %s", n, strings.Join(parts, " "))
	return nil
}

func (r *Runner) lifecycle(cmd string, args map[string]string) error {
	id := args["id"]
	var (
		rel []sched.Released
		err error
	)
	switch cmd {
	case "prefill-done":
		rel, err = r.m.PrefillDone(r.now, id)
	case "free":
		rel, err = r.m.Free(r.now, id)
	case "output":
		n, err := atoi(args, "tokens", 0)
		if err != nil {
			return err
		}
		r.m.RecordOutput(id, n)
	}
	if err != nil {
		r.printf("%s: %v", id, err)
		return nil
	}
	r.printf("%s %s", id, cmd)
	r.released(rel)
	return nil
}

func (r *Runner) tick(pos []string) error {
	if len(pos) != 1 {
		return errors.New("tick needs a duration")
	}
	d, err := time.ParseDuration(pos[0])
	if err != nil {
		return err
	}
	r.now = r.now.Add(d)
	before := r.m.Active()
	r.released(r.m.Tick(r.now))
	if gone := before - r.m.Active(); gone > 0 {
		r.printf("%d stale requests dropped", gone)
	}
	return nil
}

// printQueues prints every policy class's queue: what it holds and its DRR deficit.
func (r *Runner) printQueues() {
	for _, c := range r.m.Classes(nil) {
		r.printf("%s requests=%d raw_isl=%d cached=%d deficit=%d", c.Class, c.Requests, c.RawISLTokens, c.CachedTokens, c.Deficit)
	}
}

func (r *Runner) printLoad() {
	for _, t := range r.m.Loads(nil) {
		s := t.Load
		r.printf("%s prefill=%d decode=%s requests=%d prefilling=%d", name(t.Worker), s.ActivePrefillTokens,
			fmtF(s.ActiveDecodeBlocks), s.ActiveRequests, s.PrefillingRequests)
	}
	if n := r.m.Waiting(); n > 0 {
		r.printf("%d waiting", n)
	}
}

// expect checks the last route or the current state:
//
//	expect worker=ID [dp=N] | expect error=all-busy|no-workers|pinned-busy|pinned-not-found|no-target|not-ready
//	expect queued | expect pending=N | expect overlap tokens=... worker=ID blocks=N
//	expect load worker=ID [prefill=N] [decode=X] [requests=N]
func (r *Runner) expect(pos []string, args map[string]string) error {
	fail := func(format string, a ...any) {
		msg := fmt.Sprintf("line %d: "+format, append([]any{r.line}, a...)...)
		r.failures = append(r.failures, msg)
		r.printf("FAIL %s", msg)
	}
	what := ""
	if len(pos) > 0 {
		what = pos[0]
	}
	switch {
	case what == "queued":
		if !r.lastQueued {
			fail("last route not queued")
		}
	case what == "overlap":
		req, err := r.parseRoute(args)
		if err != nil {
			return err
		}
		k, err := workerKey(args, "worker")
		if err != nil {
			return err
		}
		want, _ := atoi(args, "blocks", 0)
		req.ID, req.Session = "\x00overlap-probe", ""
		d, err := r.m.Query(r.now, req)
		if err != nil {
			return err
		}
		for _, c := range d.Candidates {
			if c.Worker == k && int(c.Overlap) != want {
				fail("overlap of %s = %d, want %d", name(k), c.Overlap, want)
			}
		}
	case what == "load":
		k, err := workerKey(args, "worker")
		if err != nil {
			return err
		}
		found := false
		for _, t := range r.m.Loads(nil) {
			if t.Worker != k {
				continue
			}
			found = true
			s := t.Load
			got := map[string]string{"prefill": strconv.FormatUint(s.ActivePrefillTokens, 10),
				"decode": fmtF(s.ActiveDecodeBlocks), "requests": strconv.Itoa(s.ActiveRequests)}
			for _, f := range []string{"prefill", "decode", "requests"} {
				if v, ok := args[f]; ok && v != got[f] {
					fail("%s %s = %s, want %s", name(k), f, got[f], v)
				}
			}
		}
		if !found {
			fail("no worker %s", name(k))
		}
	case args["pending"] != "":
		if n, _ := strconv.Atoi(args["pending"]); n != r.m.Waiting() {
			fail("pending %d, want %d", r.m.Waiting(), n)
		}
	case args["error"] != "":
		want := map[string]error{"all-busy": scoring.ErrAllBusy, "no-workers": scoring.ErrNoWorkers,
			"pinned-busy": scoring.ErrPinnedBusy, "pinned-not-found": scoring.ErrPinnedNotFound,
			"no-target": scoring.ErrNoTarget, "not-ready": sched.ErrNotReady, "bad-request": sched.ErrBadRequest,
			"queue-rejected": sched.ErrQueueRejected}[args["error"]]
		if want == nil {
			return fmt.Errorf("unknown error name %q", args["error"])
		}
		if !errors.Is(r.lastErr, want) {
			fail("last error %v, want %v", r.lastErr, want)
		}
	case args["worker"] != "":
		k, err := workerKey(args, "worker")
		if err != nil {
			return err
		}
		if r.lastWorker == nil {
			fail("last route chose no worker (err %v), want %s", r.lastErr, name(k))
		} else if _, hasDP := args["dp"]; (hasDP && *r.lastWorker != k) || r.lastWorker.WorkerID != k.WorkerID {
			fail("last route chose %s, want %s", name(*r.lastWorker), name(k))
		}
	default:
		return fmt.Errorf("unknown expectation")
	}
	return nil
}
