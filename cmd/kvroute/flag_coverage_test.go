package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/scoring"
)

// flagEvidence names, for every flag that `kvroute router --help` or `kvroute frontend --help` lists, the
// tests that show what it does: "dir: TestName" (a test function in that directory's *_test.go files,
// the directory relative to the repository root) or "scoring/testdata/scenarios/x.txt" (a golden scenario
// whose config line sets the flag). Aliases and --no- forms count with the flag they spell. Refused flags
// are covered as groups: TestRefusedFlagsSayWhy walks refusedFlags (frontend), TestRouterRefusesFrontendOnlyFlags
// routerRefuses (router).
var flagEvidence = map[string][]string{
	// HTTP server.
	"allowed-origins":          {"cmd/kvroute: TestAllowedOrigins"},
	"admin-token":              {"frontend: TestAdminToken", "frontend: TestClosedAdminPlane"},
	"body-timeout":             {"frontend: TestDripCannotExtendDeadlines", "frontend: TestHostileSuite"},
	"header-timeout":           {"frontend: TestDripCannotExtendDeadlines", "frontend: TestHostileSuite", "cmd/kvroute: TestEPPStreamsAndHandshakes"},
	"max-body-bytes-in-flight": {"frontend: TestConnectionAndBodyBudgets", "frontend/epp: TestBodyBudget"},
	"max-conns-per-ip":         {"frontend: TestConnectionAndBodyBudgets"},
	"max-conns":                {"frontend: TestConnectionCap", "frontend: TestMaxConnsDefault", "cmd/kvroute: TestRouterCommand", "cmd/kvroute: TestEPPCommand"},
	"write-timeout":            {"frontend: TestStalledStreamFreed", "internal/netlimit: TestWriteTimeout", "frontend: TestMaxConnsDefault"},
	"router-api-token":         {"frontend: TestClosedAdminPlane"},
	"http-host":                {"cmd/kvroute: TestRouterCommand", "cmd/kvroute: TestDynamoLaunchLineStarts"},
	"http-port":                {"cmd/kvroute: TestRouterCommand", "cmd/kvroute: TestDynamoEnvironment"},
	"max-body-bytes":           {"frontend: TestOversizeBodies", "cmd/kvroute: TestDynamoEnvironment"},
	"max-concurrent-requests":  {"frontend: TestConcurrencyLimit", "cmd/kvroute: TestEPPStreamsAndHandshakes"},
	"max-header-bytes":         {"frontend: TestHeaderLimit"},
	"request-timeout":          {"cmd/kvroute: TestRequestTimeout"},
	"tls-cert-path":            {"frontend: TestTLS", "cmd/kvroute: TestDynamoLaunchLineStarts"},
	"tls-key-path":             {"frontend: TestTLS", "cmd/kvroute: TestFlagMistakesGetOneLine"},

	// Model.
	"kv-cache-block-size": {"scoring/testdata/scenarios/kv_basic.txt", "frontend: TestSelfTestFlagsBlockSizeMismatch", "cmd/kvroute: TestRouterCommand"},
	"model":               {"cmd/kvroute: TestServeTwoModels"},
	"model-name":          {"cmd/kvroute: TestFrontendWithoutTokenizer", "cmd/kvroute: TestFrontendOpsFlags"},
	"model-path":          {"cmd/kvroute: TestFrontendWithoutTokenizer", "cmd/kvroute: TestFrontendOpsFlags"},
	"namespace":           {"cmd/kvroute: TestFrontendOpsFlags"},
	"tokenizer":           {"cmd/kvroute: TestFrontendWithoutTokenizer"},

	// Workers and KV events.
	"health-check-interval":    {"frontend: TestHealthChecksTakeWorkerOutAndResyncIt"},
	"kv-events-bind":           {"actors/router: TestBindModeAttributesByTopic", "cmd/kvroute: TestServeWithBindSockets"},
	"kv-events-identity-check": {"workers/faultproxy: TestIdleRestartBehindRelay"},
	"huge-pages":               {"cmd/kvroute: TestHugePagesFlag", "internal/hugepage: TestReserveThenGrowth", "internal/hugepage: TestReservePopulated", "internal/hugepage: TestProbeWorth"},
	"worker":                   {"cmd/kvroute: TestRouterCommand", "cmd/kvroute: TestRequestTimeout"},
	"worker-self-test":         {"frontend: TestSelfTestFlagsBlockSizeMismatch"},

	// Routing.
	"load-aware":                              {"scoring/testdata/scenarios/modes.txt"},
	"decode-fallback":                         {"frontend: TestDisaggPrefillDown", "cmd/kvroute: TestDisaggFlags"},
	"conditional-prefill-policy":              {"frontend: TestBypassPolicies", "frontend: TestDisaggBypass", "cmd/kvroute: TestServePrefillDecode"},
	"conditional-prefill-bypass-below-tokens": {"frontend: TestBypassPolicies", "frontend: TestDisaggBypass", "cmd/kvroute: TestDisaggFlags"},
	"conditional-prefill-disagg-above-tokens": {"frontend: TestBypassPolicies", "frontend: TestDisaggBypass", "cmd/kvroute: TestDisaggFlags"},
	"conditional-prefill-roomy-ratio":         {"frontend: TestBypassPolicies", "cmd/kvroute: TestDisaggFlags"},
	"migration-limit":                         {"frontend: TestFaultsBeforeFirstByteMigrate", "frontend: TestFaultsWithoutMigrationFailFast", "frontend: TestKillOneOfFourUnderLoad"},
	"router-active-sequence-stride":           {"scoring/testdata/scenarios/load_tracking.txt"},
	"router-approx-worker-capacity":           {"scoring/testdata/scenarios/approx.txt"},
	"router-assume-kv-reuse":                  {"scoring/testdata/scenarios/load_tracking.txt"},
	"router-decode-active-request-weight":     {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-disk-cache-hit-weight":            {"scoring/testdata/scenarios/tiers.txt"},
	"router-event-threads":                    {"cmd/kvroute: TestFrontendOpsFlags"},
	"router-index-warm-secs":                  {"cmd/kvroute: TestFrontendOpsFlags"},
	"router-host-cache-hit-weight":            {"scoring/testdata/scenarios/tiers.txt", "actors/router: TestHostTierCreditedWithHostWeight"},
	"router-kv-events":                        {"scoring/testdata/scenarios/approx.txt"},
	"router-kv-overlap-score-credit":          {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-kv-overlap-score-credit-decay":    {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-kv-overlap-score-weight":          {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-min-initial-workers":              {"scoring/testdata/scenarios/min_workers.txt"},
	"router-mode":                             {"scoring/testdata/scenarios/modes.txt"},
	"router-predicted-ttl-secs":               {"scoring/testdata/scenarios/predicted.txt", "frontend: TestE2EPredictedTTLBeatsEventDelay"},
	"router-preset":                           {"scoring/testdata/scenarios/calibrated.txt", "actors/router: TestHostTierCreditedWithHostWeight"},
	"router-decode-weight":                    {"scoring/sched: TestDecodeCharge", "scoring/sched: TestPrefillStall", "actors/router: TestFreeOutputTeachesTheDecode"},
	"router-prefill-load-model":               {"scoring: TestValidate"},
	"router-prefill-load-scale":               {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-selection-policy":                 {"scoring/testdata/scenarios/cost_settings.txt"},
	"router-session-affinity-ttl-secs":        {"scoring/testdata/scenarios/session.txt", "frontend: TestRouteSessionAffinity"},
	"router-temperature":                      {"scoring/testdata/scenarios/temperature.txt"},
	"router-track-active-blocks":              {"scoring/testdata/scenarios/load_tracking.txt"},
	"router-track-output-blocks":              {"scoring/testdata/scenarios/load_tracking.txt", "frontend: TestStreamOutputBlocksCharged"},
	"router-track-prefill-tokens":             {"scoring/testdata/scenarios/load_tracking.txt", "scoring/testdata/scenarios/cost_settings.txt"},
	"router-ttl-secs":                         {"scoring/testdata/scenarios/approx.txt"},
	"shared-cache-multiplier":                 {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},
	"shared-cache-type":                       {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},

	// Queueing and busy thresholds.
	"active-decode-blocks-threshold":       {"scoring/testdata/scenarios/busy.txt"},
	"active-prefill-tokens-threshold":      {"scoring/testdata/scenarios/busy.txt"},
	"active-prefill-tokens-threshold-frac": {"scoring/testdata/scenarios/busy.txt"},
	"router-policy-config":                 {"actors/router: TestPolicyConfigAtStartup", "frontend: TestE2EPolicyClassOverLimit"},
	"router-queue-policy":                  {"scoring/testdata/scenarios/queue.txt", "frontend: TestE2EQueueReleasesOnePerCapacity"},
	"router-queue-threshold":               {"scoring/testdata/scenarios/queue.txt", "frontend: TestE2EQueueReleasesOnePerCapacity"},

	// Scale-out (NATS).
	"discovery":                 {"cmd/kvroute: TestNATSFlagsNewRouter"},
	"discovery-backend":         {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},
	"discovery-ttl":             {"cmd/kvroute: TestNATSFlagsNewRouter", "workers/natsplane: TestDiscovery"},
	"durable-kv-events":         {"workers/natsplane: TestDurableSurvivesNodeLoss"},
	"event-plane":               {"cmd/kvroute: TestNATSFlagsNewRouter"},
	"nats-embedded":             {"cmd/kvroute: TestNATSFlagsNewRouter"},
	"nats-embedded-port":        {"cmd/kvroute: TestNATSFlagsNewRouter"},
	"nats-replicas":             {"workers/natsplane: TestDurableSurvivesNodeLoss"},
	"nats-store-dir":            {"cmd/kvroute: TestNATSFlagsNewRouter"},
	"nats-url":                  {"cmd/kvroute: TestNATSURLAndResetStates"},
	"request-plane":             {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},
	"router-id":                 {"cmd/kvroute: TestFrontendOpsFlags", "workers/natsplane: TestReplicaSyncSpreadsLikeOneRouter"},
	"router-replica-sync":       {"cmd/kvroute: TestNATSFlagsNewRouter", "cmd/kvroute: TestReplicaSyncTwoModels", "workers/natsplane: TestReplicaSyncSpreadsLikeOneRouter"},
	"router-reset-states":       {"cmd/kvroute: TestNATSURLAndResetStates"},
	"router-snapshot-threshold": {"workers/natsplane: TestSnapshotRestore"},

	// Multimodal.
	"frontend-decoding":          {"frontend: TestE2EImageFrontendDecoding"},
	"media-allow-hosts":          {"frontend: TestE2EImageRouting", "mm: TestGuardAllowList", "cmd/kvroute: TestServeImagesFromAllowedHost"},
	"mm-data-uri-identity":       {"cmd/kvroute: TestDataURIIdentityFlag", "mm: TestResolveDataURIIdentity"},
	"mm-max-images":              {"mm: TestResolveFallbacks"},
	"mm-max-total-pixels":        {"mm: TestResolveFallbacks"},
	"mm-max-request-image-bytes": {"frontend: TestE2EImageDownloadBudgets", "mm: TestRequestImageBytes", "cmd/kvroute: TestImageByteFlags"},
	"mm-image-bytes-in-flight":   {"frontend: TestE2EImageDownloadBudgets", "mm: TestImageBytesInFlight", "cmd/kvroute: TestImageByteFlags"},
	"mm-routing":                 {"cmd/kvroute: TestFrontendOpsFlags"},
	"mm-transfer":                {"frontend: TestE2EImageTransfer"},
	"mm-transfer-advertise":      {"transfer: TestAdvertiseAddr"},

	// Logging, probes and shutdown.
	"access-log":                     {"cmd/kvroute: TestServeOperations"},
	"dump-config-to":                 {"cmd/kvroute: TestDynamoLaunchLineStarts"},
	"graceful-shutdown-grace-period": {"cmd/kvroute: TestServeOperations", "cmd/kvroute: TestEPPDrain"},
	"graceful-shutdown-timeout":      {"cmd/kvroute: TestServeOperations", "cmd/kvroute: TestEPPDrain"},
	"log-format":                     {"cmd/kvroute: TestServeOperations"},
	"log-level":                      {"cmd/kvroute: TestLogLevelFilters"},
	"pprof":                          {"cmd/kvroute: TestFrontendOpsFlags"},
	"otlp-traces-endpoint":           {"cmd/kvroute: TestOTLPTracesExported", "frontend: TestTracingFollowsTheRequest"},
	"otel-service-name":              {"cmd/kvroute: TestOTLPTracesExported"},

	// Other.
	"dyn-chat-processor": {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},
	"metrics-prefix":     {"cmd/kvroute: TestCompatFlagsRefuseOtherValues"},

	// Endpoint picker (kvroute epp).
	"grpc-port":             {"cmd/kvroute: TestEPPCommand"},
	"grpc-health-port":      {"cmd/kvroute: TestEPPCommand"},
	"secure-serving":        {"cmd/kvroute: TestEPPCommand"},
	"cert-path":             {"cmd/kvroute: TestEPPCertPath"},
	"client-ca-path":        {"cmd/kvroute: TestEPPClientCA"},
	"destination-fallbacks": {"cmd/kvroute: TestEPPCommand", "frontend/epp: TestPickerConformance"},
	"failure-mode":          {"cmd/kvroute: TestEPPCommand", "frontend/epp: TestPickerConformance"},
	"pool-name":             {"cmd/kvroute: TestEPPPool"},
	"pool-namespace":        {"cmd/kvroute: TestEPPPool"},
	"pool-group":            {"cmd/kvroute: TestEPPPool"},
	"pool-kv-events-port":   {"cmd/kvroute: TestEPPPool", "workers/k8spool: TestWatcherFollowsThePool"},
	"pool-kv-replay-port":   {"cmd/kvroute: TestEPPPool", "workers/k8spool: TestWatcherFollowsThePool"},
	"kubeconfig":            {"cmd/kvroute: TestEPPKubeconfig"},
}

// helpedCommands are the subcommands whose every listed flag must have evidence, with their flag sets
// built as the commands build them.
func helpedCommands(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	router := flag.NewFlagSet("router", flag.ContinueOnError)
	if _, err := addRouterFlags(router); err != nil {
		t.Fatal(err)
	}
	frontend := flag.NewFlagSet("frontend", flag.ContinueOnError)
	if _, err := addFrontendFlags(frontend, scoring.ModeKV); err != nil {
		t.Fatal(err)
	}
	picker := flag.NewFlagSet("epp", flag.ContinueOnError)
	if _, err := addFrontendFlags(picker, scoring.ModeKV); err != nil {
		t.Fatal(err)
	}
	addEPPFlags(picker)
	return map[string]*flag.FlagSet{"router": router, "frontend": frontend, "epp": picker}
}

// mainFlags groups fs's flags as printHelp lists them: each listed flag with its other spellings
// (aliases, --no- forms), and the refused Dynamo flags apart.
func mainFlags(fs *flag.FlagSet) (spellings map[string][]string, refusedNames []string) {
	target := func(f *flag.Flag) string {
		if m := reAliasOf.FindStringSubmatch(f.Usage); m != nil && fs.Lookup(m[1]) != nil {
			return m[1]
		}
		if m := reDisable.FindStringSubmatch(f.Usage); m != nil && fs.Lookup(m[1]) != nil {
			return m[1]
		}
		return ""
	}
	spellings = map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(refused); ok {
			refusedNames = append(refusedNames, f.Name)
			return
		}
		name := f.Name
		for n := 0; n < 4; n++ { // --no-kv-events → --no-router-kv-events → --router-kv-events
			next := target(fs.Lookup(name))
			if next == "" {
				break
			}
			name = next
		}
		spellings[name] = append(spellings[name], f.Name)
	})
	return spellings, refusedNames
}

// testFuncs returns the names of the top-level functions in dir's *_test.go files.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}

// scenarioSets reports whether a config line of the scenario script sets one of the spellings.
func scenarioSets(script string, spellings []string) bool {
	for _, line := range strings.Split(script, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "config" {
			continue
		}
		for _, kv := range fields[1:] {
			k, _, _ := strings.Cut(kv, "=")
			for _, s := range spellings {
				if k == s {
					return true
				}
			}
		}
	}
	return false
}

var reEvidenceTest = regexp.MustCompile(`^([a-z0-9_/]+): (Test[A-Za-z0-9_]+)$`)

// TestEveryHelpedFlagHasEvidence enforces that every flag `kvroute router --help` and `kvroute frontend
// --help` list names a test showing its effect (or a golden scenario setting it), that the test exists,
// and that the table names no flag the commands no longer have.
func TestEveryHelpedFlagHasEvidence(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]map[string]bool{}
	scripts := map[string]string{}
	listed := map[string][]string{} // main flag → its spellings over both commands
	refusedSeen := 0
	perCommand := map[string]int{}
	sets := helpedCommands(t)
	for _, cmdName := range []string{"router", "frontend", "epp"} {
		fs := sets[cmdName]
		spellings, refusedNames := mainFlags(fs)
		refusedSeen += len(refusedNames)
		perCommand[cmdName] = len(spellings)
		var missing []string
		for name, sp := range spellings {
			listed[name] = append(listed[name], sp...)
			if _, ok := flagEvidence[name]; !ok {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		for _, name := range missing {
			t.Errorf("kvroute %s --%s has no test evidence: add a test that shows its effect (or a golden scenario under "+
				"scoring/testdata/scenarios whose config line sets it) and name it in flagEvidence in cmd/kvroute/flag_coverage_test.go, "+
				"e.g. %q: {\"frontend: TestX\"}; or remove the flag", cmdName, name, name)
		}
	}
	if refusedSeen == 0 {
		t.Error("no refused flags found: TestRefusedFlagsSayWhy and TestRouterRefusesFrontendOnlyFlags cover them as groups; check mainFlags still recognises them")
	}
	names := make([]string, 0, len(flagEvidence))
	for name := range flagEvidence {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		sp, ok := listed[name]
		if !ok {
			t.Errorf("flagEvidence names --%s, which neither kvroute router nor kvroute frontend registers: drop or rename the entry", name)
			continue
		}
		if len(flagEvidence[name]) == 0 {
			t.Errorf("--%s: empty evidence", name)
		}
		for _, ev := range flagEvidence[name] {
			if strings.HasPrefix(ev, "scoring/testdata/scenarios/") {
				script, ok := scripts[ev]
				if !ok {
					b, err := os.ReadFile(filepath.Join(root, ev))
					if err != nil {
						t.Errorf("--%s: %v", name, err)
						continue
					}
					script = string(b)
					scripts[ev] = script
				}
				if !scenarioSets(script, sp) {
					t.Errorf("--%s: no config line of %s sets it (spellings %v)", name, ev, sp)
				}
				continue
			}
			m := reEvidenceTest.FindStringSubmatch(ev)
			if m == nil {
				t.Errorf("--%s: evidence %q is neither \"dir: TestName\" nor a scenario file", name, ev)
				continue
			}
			dir, fn := m[1], m[2]
			if funcs[dir] == nil {
				funcs[dir] = testFuncs(t, filepath.Join(root, filepath.FromSlash(dir)))
			}
			if !funcs[dir][fn] {
				t.Errorf("--%s: %s has no function %s in its *_test.go files", name, dir, fn)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("router %d flags, frontend %d, %d distinct (%d spellings), each with evidence; %d refused flag names covered by TestRefusedFlagsSayWhy and TestRouterRefusesFrontendOnlyFlags",
		perCommand["router"], perCommand["frontend"], len(listed), countSpellings(listed), refusedSeen)
}

func countSpellings(m map[string][]string) int {
	seen := map[string]bool{}
	for _, sp := range m {
		for _, s := range sp {
			seen[s] = true
		}
	}
	return len(seen)
}
