package scenario

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/load"
	"github.com/kvroute/kvroute/scoring/prefix"
	"github.com/kvroute/kvroute/scoring/queue"
)

// Index is the prefix index the runner drives. *prefix.Index satisfies it; an actor-backed index can be
// plugged in through the same methods.
type Index interface {
	Store(w prefix.WorkerKey, parent uint64, hasParent bool, blocks []prefix.Block) error
	Remove(w prefix.WorkerKey, engineHashes []uint64) error
	ClearWorker(workerID uint64)
	RemoveWorker(workerID uint64)
	FindMatches(local []uint64, out []prefix.Score) []prefix.Score
}

var _ Index = (*prefix.Index)(nil)

// engineSalt makes the simulated engine's block hashes differ from the router's sequence hashes, as real
// engines' do (they salt and digest), so the runner exercises the re-keying path.
const engineSalt = 0x5eed_e791_0e57_ab1e

// epoch is the fake clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type worker struct {
	key     scoring.WorkerKey
	device  scoring.Device
	cap     scoring.Capacity
	tracker *load.Tracker
}

type pending struct {
	id      string
	args    map[string]string
	arrival time.Time
}

// Runner executes one scenario script; every command appends its result to the transcript.
type Runner struct {
	newIndex func() Index

	cfg     scoring.Config
	rng     *rand.Rand
	now     time.Time
	index   Index
	workers []*worker
	routes  map[string]*worker
	queue   *queue.Queue[*pending]
	approx  *scoring.Approx
	reg     *load.Registry // fleet-wide active index, cross-checked against the trackers
	regIDs  map[string]bool
	rr      uint64

	lastWorker *scoring.WorkerKey
	lastErr    error
	lastQueued bool

	out      *strings.Builder
	failures []string
	line     int
}

// New returns a runner whose index comes from newIndex (called again by each config command).
func New(newIndex func() Index) *Runner {
	r := &Runner{newIndex: newIndex, out: &strings.Builder{}}
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
	case "kv-event":
		return r.kvEvent(pos, args)
	case "route":
		if n, ok := args["n"]; ok {
			return r.routeN(n, args)
		}
		return r.route(args, false)
	case "sample":
		return r.sample(args)
	case "prefill-done", "free", "output":
		return r.lifecycle(fields[0], args)
	case "tick":
		return r.tick(pos)
	case "load":
		r.printLoad()
		return nil
	case "expect":
		return r.expect(pos, args)
	}
	return fmt.Errorf("unknown command %q", fields[0])
}

// configure resets all state. Keys are router flag names (scoring.Flags), DYN_* environment variables,
// and seed=N.
func (r *Runner) configure(kvs []string) error {
	cfg := scoring.DefaultConfig()
	cfg.Mode = scoring.ModeKV
	cfg.BlockSize = 4
	seed := uint64(1)
	var flags []string
	env := map[string]string{}
	for _, kv := range kvs {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "DYN_") {
			env[k] = v
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
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return err
	}
	q, err := queue.New[*pending](cfg.QueuePolicy, epoch)
	if err != nil {
		return err
	}
	*r = Runner{newIndex: r.newIndex, out: r.out, failures: r.failures, line: r.line,
		cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e37)), now: epoch, index: r.newIndex(),
		routes: map[string]*worker{}, queue: q, approx: scoring.NewApprox(scoring.ApproxConfigFrom(&cfg)),
		reg: load.NewRegistry(), regIDs: map[string]bool{}}
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

func (r *Runner) find(k scoring.WorkerKey) *worker {
	for _, w := range r.workers {
		if w.key == k {
			return w
		}
	}
	return nil
}

func (r *Runner) addWorker(args map[string]string) error {
	k, err := workerKey(args, "id")
	if err != nil {
		return err
	}
	if r.find(k) != nil {
		return fmt.Errorf("worker %v exists", k)
	}
	w := &worker{key: k, tracker: load.New(load.ConfigFrom(&r.cfg))}
	if args["device"] == "cpu" {
		w.device = scoring.DeviceCPU
	}
	if err := r.setCapacity(w, args); err != nil {
		return err
	}
	r.workers = append(r.workers, w)
	slices.SortFunc(r.workers, func(a, b *worker) int {
		return cmp.Or(cmp.Compare(a.key.WorkerID, b.key.WorkerID), cmp.Compare(a.key.DPRank, b.key.DPRank))
	})
	return nil
}

func (r *Runner) setCapacity(w *worker, args map[string]string) error {
	for _, f := range []struct {
		k string
		p *uint64
	}{{"total-kv-blocks", &w.cap.TotalKVBlocks}, {"kv-used", &w.cap.KVUsedBlocks}, {"max-batched", &w.cap.MaxNumBatchedTokens}} {
		if v, ok := args[f.k]; ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return err
			}
			*f.p = n
			if f.k == "kv-used" {
				w.cap.KVUsedKnown = true
			}
		}
	}
	if w.cap.TotalKVBlocks > 0 {
		r.approx.SetCapacity(w.key, int(w.cap.TotalKVBlocks))
	}
	return nil
}

func (r *Runner) setWorker(args map[string]string) error {
	k, err := workerKey(args, "id")
	if err != nil {
		return err
	}
	w := r.find(k)
	if w == nil {
		return fmt.Errorf("no worker %v", k)
	}
	return r.setCapacity(w, args)
}

func (r *Runner) removeWorker(args map[string]string) error {
	id, err := atoi(args, "id", -1)
	if err != nil || id < 0 {
		return errors.New("id= missing")
	}
	r.workers = slices.DeleteFunc(r.workers, func(w *worker) bool {
		if w.key.WorkerID == uint64(id) {
			r.approx.RemoveWorker(w.key)
			return true
		}
		return false
	})
	for rid, w := range r.routes {
		if w.key.WorkerID == uint64(id) {
			delete(r.routes, rid)
			delete(r.regIDs, rid)
		}
	}
	r.reg.RemoveWorker(uint64(id))
	r.index.RemoveWorker(uint64(id))
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

// kvEvent: kv-event worker=ID [dp=N] store|remove tokens=... [from=BLOCK] | clear. Store and remove act on
// the blocks of tokens from block index `from` on; a store with from > 0 names block from−1 as parent.
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
		err = r.index.Store(pk, parent, from > 0, blocks)
		r.printf("stored %d blocks on %s: %s", len(blocks), name(k), errText(err))
	case "remove":
		// Leaf first, as an engine evicts: removing a parent first would cascade its children out.
		eh := make([]uint64, 0, len(local)-from)
		for i := len(local) - 1; i >= from; i-- {
			eh = append(eh, seq[i]^engineSalt)
		}
		err = r.index.Remove(pk, eh)
		r.printf("removed %d blocks on %s: %s", len(eh), name(k), errText(err))
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

type routeReq struct {
	req      scoring.Request
	local    []uint64
	seq      []uint64
	reuse    bool
	trackPf  *bool
	osl      int
	priority float64
	strict   uint32
}

func (r *Runner) parseRoute(args map[string]string) (*routeReq, error) {
	tokens, err := parseTokens(args["tokens"])
	if err != nil {
		return nil, err
	}
	rr := &routeReq{req: scoring.Request{ISL: len(tokens), ReturnCosts: true}}
	rr.local, rr.seq = r.hashes(tokens)
	if _, ok := args["pin"]; ok {
		pin := map[string]string{"pin": args["pin"]}
		if v, ok := args["pin-rank"]; ok {
			pin["dp"] = v
		}
		k, err := workerKey(pin, "pin")
		if err != nil {
			return nil, err
		}
		rr.req.Pinned, rr.req.Pin, rr.req.PinRank = true, k, len(pin) == 2
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
		rr.req.Override = ov
	}
	rr.reuse = r.cfg.AssumeKVReuse
	if ov.AssumeKVReuse != nil {
		rr.reuse = *ov.AssumeKVReuse
	}
	rr.trackPf = ov.TrackPrefillTokens
	if rr.osl, err = atoi(args, "osl", 0); err != nil {
		return nil, err
	}
	if v, ok := args["priority"]; ok {
		if rr.priority, err = strconv.ParseFloat(v, 64); err != nil {
			return nil, err
		}
	}
	strict, err := atoi(args, "strict", 0)
	rr.strict = uint32(strict)
	return rr, err
}

// candidates builds the candidate list: index overlap, published load, projection, capacity.
func (r *Runner) candidates(rr *routeReq) []scoring.Candidate {
	var scores []prefix.Score
	if r.cfg.NeedsIndexer() {
		scores = r.index.FindMatches(rr.local, nil)
	}
	var regAdditional map[scoring.WorkerKey]uint64
	if r.registryApplies(rr.reuse) {
		regAdditional = map[scoring.WorkerKey]uint64{}
		for _, s := range r.reg.ActivePrefix(rr.local, nil) {
			regAdditional[scoring.WorkerKey(s.Worker)] = uint64(s.Blocks)
		}
	}
	cands := make([]scoring.Candidate, 0, len(r.workers))
	for _, w := range r.workers {
		c := scoring.Candidate{Worker: w.key, Device: w.device, Capacity: w.cap}
		for _, s := range scores {
			if scoring.WorkerKey(s.Worker) == w.key {
				c.Overlap.Device = s.Blocks
			}
		}
		c.Load = w.tracker.Load(rr.seq, rr.reuse)
		if regAdditional != nil {
			if want := uint64(len(rr.seq)) - regAdditional[w.key]; want != c.Load.AdditionalBlocks {
				r.failures = append(r.failures, fmt.Sprintf("line %d: %s additional blocks: tracker %d, registry %d",
					r.line, name(w.key), c.Load.AdditionalBlocks, want))
			}
		}
		cands = append(cands, c)
	}
	return cands
}

func (r *Runner) route(args map[string]string, fromQueue bool) error {
	id := args["id"]
	if id == "" {
		return errors.New("route needs id=")
	}
	if _, dup := r.routes[id]; dup {
		return fmt.Errorf("route %q already active", id)
	}
	rr, err := r.parseRoute(args)
	if err != nil {
		return err
	}
	cands := r.candidates(rr)
	r.lastWorker, r.lastErr, r.lastQueued = nil, nil, false
	if !fromQueue && scoring.ShouldQueue(&rr.req, cands, &r.cfg) {
		key := queue.Key{Strict: rr.strict, PriorityJump: queue.Jump(rr.priority), Arrival: r.now, ISL: rr.req.ISL,
			BestCachedTokens: scoring.BestCachedTokens(&rr.req, cands, &r.cfg)}
		r.queue.Push(key, &pending{id: id, args: args, arrival: r.now})
		r.lastQueued = true
		r.printf("%s queued (%d pending)", id, r.queue.Len())
		return nil
	}
	rr.req.RoundRobin = r.rr
	d, err := scoring.Select(rr.req, cands, &r.cfg, r.rng)
	r.rr++
	if err != nil {
		r.lastErr = err
		r.printf("%s error: %v", id, err)
		return nil
	}
	w := r.workers[d.Index]
	r.lastWorker = &w.key
	r.printf("%s -> %s overlap=%d cost=%s", id, name(d.Worker), d.Overlap, fmtF(d.Cost))
	var costs []string
	for _, c := range d.Costs {
		s := fmt.Sprintf("%s:%d/%s", name(c.Worker), c.Overlap, fmtF(c.Cost))
		if c.Busy {
			s += "(busy)"
		}
		costs = append(costs, s)
	}
	r.printf("   costs %s", strings.Join(costs, " "))
	for _, gone := range w.tracker.MaybeExpire(r.now) {
		delete(r.routes, gone)
		r.regFree(gone)
		r.printf("   stale request %s dropped from %s", gone, name(w.key))
	}
	if err := w.tracker.AddRequest(load.Request{ID: id, SeqHashes: rr.seq, ISL: rr.req.ISL, OverlapBlocks: d.Overlap,
		ExpectedOutputTokens: rr.osl, AssumeKVReuse: &rr.reuse, TrackPrefillTokens: rr.trackPf, Now: r.now}); err != nil {
		return err
	}
	r.routes[id] = w
	if r.registryApplies(rr.reuse) {
		if err := r.reg.Add(id, w.key, rr.local, rr.seq); err != nil {
			return err
		}
		r.regIDs[id] = true
	}
	if !r.cfg.UseKVEvents && r.cfg.NeedsIndexer() {
		r.recordApprox(w.key, rr)
	}
	return nil
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
		if err := r.route(a, false); err != nil {
			return err
		}
	}
	return nil
}

// registryApplies says when load.Registry answers the same as the trackers: KV reuse, stride 1, blocks
// tracked. Requests routed without reuse never enter the registry (their blocks have fresh hashes).
func (r *Runner) registryApplies(reuse bool) bool {
	return reuse && r.cfg.ActiveSequenceStride == 1 && r.cfg.TrackActiveBlocks
}

func (r *Runner) regFree(id string) {
	if r.regIDs[id] {
		r.reg.Free(id)
		delete(r.regIDs, id)
	}
}

// recordApprox is approximate mode: index the routed prompt for the chosen worker, with TTL.
func (r *Runner) recordApprox(k scoring.WorkerKey, rr *routeReq) {
	from, ev := r.approx.Record(k, rr.seq, r.now)
	if from < len(rr.seq) {
		blocks := make([]prefix.Block, 0, len(rr.seq)-from)
		for i := from; i < len(rr.seq); i++ {
			blocks = append(blocks, prefix.Block{EngineHash: rr.seq[i], LocalHash: rr.local[i]})
		}
		var parent uint64
		if from > 0 {
			parent = rr.seq[from-1]
		}
		if err := r.index.Store(prefix.WorkerKey(k), parent, from > 0, blocks); err != nil {
			r.printf("   approx store: %v", err)
		}
	}
	if len(ev) > 0 {
		_ = r.index.Remove(prefix.WorkerKey(k), ev)
		r.printf("   approx evicted %d blocks from %s", len(ev), name(k))
	}
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// sample routes n dry copies of a request (no AddRequest) and prints how often each worker wins: for
// temperature and the random modes.
func (r *Runner) sample(args map[string]string) error {
	n, err := atoi(args, "n", 1000)
	if err != nil {
		return err
	}
	rr, err := r.parseRoute(args)
	if err != nil {
		return err
	}
	rr.req.ReturnCosts = false
	cands := r.candidates(rr)
	hits := make([]int, len(cands))
	for range n {
		rr.req.RoundRobin = r.rr
		r.rr++
		d, err := scoring.Select(rr.req, cands, &r.cfg, r.rng)
		if err != nil {
			r.printf("error: %v", err)
			return nil
		}
		hits[d.Index]++
	}
	var parts []string
	for i, c := range cands {
		parts = append(parts, fmt.Sprintf("%s=%d", name(c.Worker), hits[i]))
	}
	r.printf("%d draws: %s", n, strings.Join(parts, " "))
	return nil
}

func (r *Runner) lifecycle(cmd string, args map[string]string) error {
	id := args["id"]
	w, ok := r.routes[id]
	if !ok {
		r.printf("%s: unknown request", id)
		return nil
	}
	switch cmd {
	case "prefill-done":
		w.tracker.MarkPrefillCompleted(id)
	case "free":
		w.tracker.Free(id)
		r.regFree(id)
		delete(r.routes, id)
	case "output":
		n, err := atoi(args, "tokens", 0)
		if err != nil {
			return err
		}
		w.tracker.RecordOutput(id, n)
	}
	r.printf("%s %s on %s", id, cmd, name(w.key))
	if cmd != "output" {
		return r.drain()
	}
	return nil
}

// drain pops queued requests while capacity allows (spec §9.1: whenever capacity frees).
func (r *Runner) drain() error {
	for r.queue.Len() > 0 {
		p, _, _ := r.queue.Peek()
		rr, err := r.parseRoute(p.args)
		if err != nil {
			return err
		}
		if scoring.ShouldQueue(&rr.req, r.candidates(rr), &r.cfg) {
			return nil
		}
		r.queue.Pop()
		r.printf("dequeue %s after %v", p.id, r.now.Sub(p.arrival))
		if err := r.route(p.args, true); err != nil {
			return err
		}
	}
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
	for _, rem := range r.approx.Expire(r.now) {
		_ = r.index.Remove(prefix.WorkerKey(rem.Worker), rem.Hashes)
		r.printf("expired %d blocks from %s", len(rem.Hashes), name(rem.Worker))
	}
	for _, w := range r.workers {
		for _, id := range w.tracker.Expire(r.now) {
			delete(r.routes, id)
			r.regFree(id)
			r.printf("stale request %s dropped from %s", id, name(w.key))
		}
	}
	return nil
}

func (r *Runner) printLoad() {
	for _, w := range r.workers {
		s := w.tracker.Snapshot()
		r.printf("%s prefill=%d decode=%s requests=%d prefilling=%d", name(w.key), s.ActivePrefillTokens,
			fmtF(s.ActiveDecodeBlocks), s.ActiveRequests, s.PrefillingRequests)
	}
	if r.queue.Len() > 0 {
		r.printf("queue %d pending", r.queue.Len())
	}
}

// expect checks the last route or the current state:
//
//	expect worker=ID [dp=N] | expect error=all-busy|no-workers|pinned-busy|pinned-not-found|no-target
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
		rr, err := r.parseRoute(args)
		if err != nil {
			return err
		}
		k, err := workerKey(args, "worker")
		if err != nil {
			return err
		}
		want, _ := atoi(args, "blocks", 0)
		for _, c := range r.candidates(rr) {
			if c.Worker == k && int(c.Overlap.Device) != want {
				fail("overlap of %s = %d, want %d", name(k), c.Overlap.Device, want)
			}
		}
	case what == "load":
		k, err := workerKey(args, "worker")
		if err != nil {
			return err
		}
		w := r.find(k)
		if w == nil {
			fail("no worker %s", name(k))
			return nil
		}
		s := w.tracker.Snapshot()
		got := map[string]string{"prefill": strconv.FormatUint(s.ActivePrefillTokens, 10),
			"decode": fmtF(s.ActiveDecodeBlocks), "requests": strconv.Itoa(s.ActiveRequests)}
		for _, f := range []string{"prefill", "decode", "requests"} {
			if v, ok := args[f]; ok && v != got[f] {
				fail("%s %s = %s, want %s", name(k), f, got[f], v)
			}
		}
	case args["pending"] != "":
		if n, _ := strconv.Atoi(args["pending"]); n != r.queue.Len() {
			fail("pending %d, want %d", r.queue.Len(), n)
		}
	case args["error"] != "":
		want := map[string]error{"all-busy": scoring.ErrAllBusy, "no-workers": scoring.ErrNoWorkers,
			"pinned-busy": scoring.ErrPinnedBusy, "pinned-not-found": scoring.ErrPinnedNotFound,
			"no-target": scoring.ErrNoTarget}[args["error"]]
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
