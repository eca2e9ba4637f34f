package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// The command line's shared behaviour: every subcommand parses through parseFlags, so help goes to stdout
// with exit 0 grouped by topic, and a mistake gets one line on stderr (with a "did you mean") and exit 2,
// never a usage dump.

// Flag topics, in help order. topicOf puts each flag under one of them.
const (
	topicHTTP     = "HTTP server"
	topicModel    = "Model"
	topicWorkers  = "Workers and KV events"
	topicRouting  = "Routing (Dynamo's --router-* flags)"
	topicQueue    = "Queueing and busy thresholds"
	topicScaleOut = "Scale-out (NATS)"
	topicMM       = "Multimodal"
	topicOps      = "Logging, probes and shutdown"
	topicEPP      = "Endpoint picker (kvroute epp)"
	topicOther    = "Other"
	topicRefused  = "Dynamo flags kvroute refuses (each says why)"
)

var topicOrder = []string{topicHTTP, topicModel, topicWorkers, topicRouting, topicQueue, topicScaleOut, topicMM, topicOps, topicEPP, topicOther, topicRefused}

// topicPrefixes maps a flag-name prefix to its topic; the longest matching prefix wins.
var topicPrefixes = map[string]string{
	"http-": topicHTTP, "host": topicHTTP, "tls-": topicHTTP, "max-header-bytes": topicHTTP, "max-body-bytes": topicHTTP,
	"max-concurrent-requests": topicHTTP, "admin-token": topicHTTP, "request-timeout": topicHTTP, "port": topicHTTP,
	"router-api-token": topicHTTP, "allowed-origins": topicHTTP, "max-conns-per-ip": topicHTTP, "max-conns": topicHTTP, "header-timeout": topicHTTP, "write-timeout": topicHTTP, "body-timeout": topicHTTP,
	"model": topicModel, "served-model-name": topicModel, "tokenizer": topicModel, "kv-cache-block-size": topicModel,
	"block-size": topicModel, "namespace": topicModel,
	"worker": topicWorkers, "kv-events": topicWorkers, "health-check-interval": topicWorkers, "workers": topicWorkers,
	"num-gpu-blocks": topicWorkers, "speedup-ratio": topicWorkers, "replay": topicWorkers, "zmq": topicWorkers,
	"router-": topicRouting, "load-aware": topicRouting, "shared-cache-": topicRouting, "migration-limit": topicRouting,
	"kv-overlap-score-weight": topicRouting, "decode-fallback": topicRouting, "conditional-prefill-": topicRouting,
	"router-queue-": topicQueue, "active-": topicQueue, "busy-threshold": topicQueue, "router-policy-config": topicQueue,
	"nats": topicScaleOut, "event-plane": topicScaleOut, "discovery": topicScaleOut, "durable-kv-events": topicScaleOut,
	"router-durable-kv-events": topicScaleOut, "router-snapshot-threshold": topicScaleOut, "router-reset-states": topicScaleOut,
	"router-id": topicScaleOut, "router-replica-sync": topicScaleOut, "request-plane": topicScaleOut,
	"mm-": topicMM, "media-": topicMM, "frontend-decoding": topicMM,
	"log-": topicOps, "access-log": topicOps, "graceful-shutdown": topicOps, "pprof": topicOps, "dump-config-to": topicOps, "otlp-": topicOps, "otel-": topicOps,
	"ready-": topicOps, "metrics-prefix": topicOps, "dyn-chat-processor": topicModel,
	"grpc-": topicEPP, "secure-serving": topicEPP, "cert-path": topicEPP, "client-ca-path": topicEPP, "destination-fallbacks": topicEPP,
	"failure-mode": topicEPP, "pool-": topicEPP, "kubeconfig": topicEPP,
}

func topicOf(name string) string {
	best, topic := -1, topicOther
	for p, t := range topicPrefixes {
		if strings.HasPrefix(name, p) && len(p) > best {
			best, topic = len(p), t
		}
	}
	return topic
}

// refused marks a flag registered only to be refused: its Set fails with the reason.
type refused struct {
	reason string
	// allow is the one value that is accepted (kvroute's behaviour already), e.g. "false"; empty: none.
	allow  string
	isBool bool
}

func (r refused) String() string { return r.allow }
func (r refused) Set(s string) error {
	if r.allow != "" && strings.EqualFold(strings.TrimSpace(s), r.allow) {
		return nil
	}
	return errors.New(r.reason)
}
func (r refused) IsBoolFlag() bool { return r.isBool }

// refuse registers name (and, for a boolean, its --no- form, which is accepted) as a flag kvroute cannot
// honour. env, when set in the environment to a value other than allow, fails startup the same way.
func refuse(fs *flag.FlagSet, name, env string, isBool bool, allow, reason string) error {
	fs.Var(refused{reason: reason, allow: allow, isBool: isBool}, name, "refused: "+reason)
	if isBool {
		fs.Var(refused{reason: reason, allow: "true", isBool: true}, "no-"+name, "refused: "+reason)
	}
	return refusedEnv(env, isBool, allow, reason)
}

// refusedEnv fails when env, the variable of a flag kvroute cannot honour, is set to a value other than
// allow (for a boolean: to true).
func refusedEnv(env string, isBool bool, allow, reason string) error {
	if v, ok := os.LookupEnv(env); ok && env != "" && v != "" {
		if isBool && !truthy(v) {
			return nil
		}
		if allow == "" || !strings.EqualFold(v, allow) {
			return fmt.Errorf("$%s: %s", env, reason)
		}
	}
	return nil
}

// envBool reads a boolean environment variable: unset or empty is false; 1/true/yes/on and
// 0/false/no/off in any case; anything else fails startup, as a malformed number does.
func envBool(name string) (bool, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(name)))
	switch v {
	case "", "0", "false", "no", "off":
		return false, nil
	case "1", "true", "yes", "on":
		return true, nil
	}
	return false, fmt.Errorf("$%s %q: want true or false (1/0, yes/no, on/off)", name, os.Getenv(name))
}

func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// alias registers name as another spelling of the already registered flag canonical.
func alias(fs *flag.FlagSet, name, canonical string) {
	f := fs.Lookup(canonical)
	if f == nil {
		panic("kvroute: alias of unregistered flag --" + canonical)
	}
	fs.Var(f.Value, name, "alias of --"+canonical)
}

// addNegations registers --no-x for every boolean flag x that has none, as Dynamo's CLI offers
// (--no-load-aware, --no-router-replica-sync, ...).
func addNegations(fs *flag.FlagSet) {
	var bools []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && !strings.HasPrefix(f.Name, "no-") {
			if _, isRefused := f.Value.(refused); !isRefused {
				bools = append(bools, f)
			}
		}
	})
	for _, f := range bools {
		if fs.Lookup("no-"+f.Name) == nil {
			fs.Var(negation{f.Value}, "no-"+f.Name, "disable --"+f.Name)
		}
	}
}

// negation is the --no-x form of a boolean flag.
type negation struct{ v flag.Value }

func (n negation) String() string { return "" }
func (n negation) Set(s string) error {
	switch strings.ToLower(s) {
	case "true", "1", "":
		return n.v.Set("false")
	case "false", "0":
		return n.v.Set("true")
	}
	return fmt.Errorf("want true or false")
}
func (negation) IsBoolFlag() bool { return true }

// parseFlags parses args into fs. It returns ok=false with the exit code when the command should stop:
// 0 after printing help (-h, --help) to stdout, 2 after a one-line error on stderr. Positional arguments
// are an error unless allowArgs.
func parseFlags(fs *flag.FlagSet, args []string, allowArgs bool) (code int, ok bool) {
	return parseFlagsTo(fs, args, allowArgs, helpOut, errOut)
}

// helpOut and errOut are where help and flag errors go; tests swap them.
var helpOut, errOut io.Writer = os.Stdout, os.Stderr

func parseFlagsTo(fs *flag.FlagSet, args []string, allowArgs bool, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printHelp(stdout, fs)
		return 0, false
	case err != nil:
		fmt.Fprintf(stderr, "kvroute %s: %s\n", fs.Name(), describeFlagError(fs, err))
		return 2, false
	case !allowArgs && fs.NArg() > 0:
		fmt.Fprintf(stderr, "kvroute %s: unexpected argument %q (flags start with --; see `kvroute help %s`)\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	return 0, true
}

var (
	reUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	reInvalid   = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for flag -+([^:]+): (.*)$`)
	reNeedsArg  = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	reBadBool   = regexp.MustCompile(`^invalid boolean flag -*([^:]+): (.*)$`)
)

// describeFlagError turns the flag package's error into kvroute's one line.
func describeFlagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := reUndefined.FindStringSubmatch(msg); m != nil {
		s := fmt.Sprintf("unknown flag --%s", m[1])
		if sug := suggest(m[1], flagNames(fs)); sug != "" {
			s += fmt.Sprintf(" (did you mean --%s?)", sug)
		}
		return s + fmt.Sprintf("; see `kvroute help %s`", helpName(fs))
	}
	if m := reInvalid.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s %q: %s", m[2], m[1], m[3])
	}
	if m := reBadBool.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s: %s", m[1], m[2])
	}
	if m := reNeedsArg.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s needs a value", m[1])
	}
	return msg
}

func helpName(fs *flag.FlagSet) string { return fs.Name() }

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// suggest returns the candidate closest to s by edit distance when it is close enough to be a likely
// typo (at most a third of the name), or one that contains s or is contained in it; "" otherwise.
func suggest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(s, c)
		if d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if best != "" && bestD <= max(2, len(s)/3) {
		return best
	}
	for _, c := range candidates { // a shortened or lengthened name: "busy" → "busy-threshold", "kv-aware" → "kv"
		if len(s) >= 4 && strings.Contains(c, s) || len(c) >= 2 && strings.HasPrefix(s, c+"-") {
			return c
		}
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// oneOf checks a value against its valid set, naming the set and the closest value.
func oneOf(flagName, v string, valid []string) error {
	for _, x := range valid {
		if v == x {
			return nil
		}
	}
	s := fmt.Sprintf("--%s %q: want one of %s", flagName, v, strings.Join(valid, ", "))
	if sug := suggest(v, valid); sug != "" {
		s += fmt.Sprintf(" (did you mean %s?)", sug)
	}
	return errors.New(s)
}

var (
	reAliasOf = regexp.MustCompile(`alias of --([a-z0-9-]+)`)
	reDisable = regexp.MustCompile(`^disable --([a-z0-9-]+)$`)
)

// printHelp writes fs's flags grouped by topic. Aliases and --no- forms are listed with the flag they
// spell, refused Dynamo flags by name only.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	summary := ""
	if c, ok := commands[strings.Fields(fs.Name())[0]]; ok {
		summary = c.summary
	}
	fmt.Fprintf(w, "usage: kvroute %s [flags]\n", fs.Name())
	if summary != "" && !strings.Contains(fs.Name(), " ") {
		fmt.Fprintf(w, "\n%s\n", summary)
	}
	also := map[string][]string{}
	var refusedNames []string
	groups := map[string][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(refused); ok {
			if !strings.HasPrefix(f.Name, "no-") && len(f.Name) > 1 {
				refusedNames = append(refusedNames, "--"+f.Name)
			}
			return
		}
		if m := reAliasOf.FindStringSubmatch(f.Usage); m != nil && fs.Lookup(m[1]) != nil {
			also[m[1]] = append(also[m[1]], "--"+f.Name)
			return
		}
		if m := reDisable.FindStringSubmatch(f.Usage); m != nil && fs.Lookup(m[1]) != nil {
			also[m[1]] = append(also[m[1]], "--"+f.Name)
			return
		}
		t := topicOf(f.Name)
		groups[t] = append(groups[t], f)
	})
	for _, t := range topicOrder {
		fl := groups[t]
		if len(fl) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", t)
		for _, f := range fl {
			typ, usage := flag.UnquoteUsage(f)
			head := "  --" + f.Name
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				if typ == "" {
					typ = "value"
				}
				head += " " + typ
			}
			if a := also[f.Name]; len(a) > 0 {
				sort.Strings(a)
				head += " (also " + strings.Join(a, ", ") + ")"
			}
			if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "[]" && !strings.Contains(usage, "(default") {
				usage += " (default " + def + ")"
			}
			fmt.Fprintf(w, "%s\n      %s\n", head, usage)
		}
	}
	if len(refusedNames) > 0 {
		sort.Strings(refusedNames)
		fmt.Fprintf(w, "\n%s:\n  %s\n", topicRefused, wrapWords(refusedNames, 100, "  "))
	}
}

func wrapWords(words []string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, wd := range words {
		if i > 0 {
			if line+1+len(wd) > width {
				b.WriteString("\n" + indent)
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(wd)
		line += len(wd)
	}
	return b.String()
}
