// Command kvroute is kvroute's one binary. Each subcommand lives in its own file and registers itself in
// init with register(name, summary, run):
//
//	serve      the one-command demo: frontend on :8000 plus simulated workers in-process (make run)
//	frontend   the OpenAI-compatible frontend with the embedded KV router, pointed at real workers
//	router     the standalone router service (overlap scores, routing decisions, worker registry)
//	epp        the endpoint picker of an inference gateway: Envoy ext_proc over gRPC (TLS, health),
//	           the frontend's request path decides; workers from an InferencePool's pods (epp.go)
//	mocker     simulated vLLM workers: OpenAI API, prefix cache, vLLM KV events over ZMQ
//	relay      re-publishes one worker's ZMQ KV events on NATS (scale-out)
//	bench      the benchmark suite (indexer, route, tokenizer, oracle, e2e)
//	tokenize   tokenizes a prompt or chat messages with a model directory
//	hash       prints router block hashes for given tokens
//
// `kvroute help <command>` (or --help) prints a command's flags grouped by topic on stdout, exit 0;
// `kvroute version` the build. Every command parses through parseFlags (cli.go): a mistake is one line
// on stderr with a "did you mean", exit 2. frontend and serve accept Dynamo's frontend launch line
// (dynamo.go): its flags and DYN_* variables are honoured, or refused with the reason. logging.go builds
// the slog logger (--log-format, --log-level, DYN_LOG, DYN_LOGGING_JSONL); tracing.go the OTLP tracer.
//
// Every flag that `kvroute router --help`, `kvroute frontend --help` or `kvroute epp --help` lists has a test that shows its
// effect, named in flagEvidence (flag_coverage_test.go); TestEveryHelpedFlagHasEvidence fails on a new
// flag without an entry. addRouterFlags, addFrontendFlags and addEPPFlags are the one place each command's flags are
// registered, so that test sees what the commands parse.
//
// # Ownership
//
// Flags are read only here (STYLE §13): each subcommand builds its components' Config values from its
// flags and environment, starts them, and stops them on SIGINT/SIGTERM (frontend and serve through
// frontend.Drain: readiness off, grace period, bounded drain).
package main
