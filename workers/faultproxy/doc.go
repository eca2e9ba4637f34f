// Package faultproxy is a fault-injecting proxy for one vLLM KV event stream: it
// subscribes to a worker's PUB socket, re-publishes each batch on its own PUB socket, and passes
// replay requests through to the worker's ROUTER. On the way it can drop, duplicate, reorder and delay
// batches (by probability from a seeded RNG, or for explicit sequence numbers) and cut the stream: close
// its PUB socket for a while, so that subscribers see a disconnect and reconnect. It exists for the fault
// suite (router index convergence under faults) and is not used in production.
//
// # Overview
//
//   - proxy.go: Config, Start, Proxy (SetFaults, Cut, SetUpstream, Stats, Close).
//   - faults.go: Faults (the probabilities and the per-seq rules) and the pure decision of one batch.
//   - events.go: the event pair (SUB upstream, PUB downstream) and its hold queue.
//   - replay.go: the replay pair (ROUTER downstream, one DEALER upstream per request).
//
// # Concurrency model
//
// Two goroutines, one per socket pair, both started by Start through one tracked helper and stopped by
// Close. pebbe/zmq4 sockets are not thread-safe and closing one from another goroutine crashes the
// process, so every socket is opened, used and closed by the goroutine of its pair. Control calls from
// other goroutines go through atomic.Pointers (SetFaults: the faults, read per batch; SetUpstream: the
// worker's endpoints, read per poll and per replay request) and a buffered channel (Cut: "faultproxy.cuts",
// 16); counters are atomics.
//
// # Ownership
//
//   - SUB, PUB, the RNG and the hold queue: the events goroutine.
//   - ROUTER and the per-request DEALERs: the replay goroutine.
//   - Faults: immutable once stored; SetFaults swaps the pointer and the events goroutine re-seeds its RNG
//     when it sees a new one.
//
// A worker's death is not mirrored by itself (the proxy's subscribers keep their connection, as behind a
// relay); tests that want the disconnect a direct subscriber would see cut the proxy while the worker is
// down. (A socket monitor on the upstream SUB would do it automatically, but with a monitor attached the
// SUB intermittently never received from an ipc:// worker in our runs; the cut is explicit and
// deterministic, and the suite's workers publish on loopback TCP.)
//
// # Data flow
//
//  1. SUB receives [topic, seq_be8, payload] from the worker (any other shape passes through untouched).
//  2. decide(seq) picks one fault: a per-seq rule first, else drop, duplicate, reorder, delay in that
//     order, each with its probability.
//  3. pass: send now. drop: count and forget. duplicate: send twice. reorder: hold until the next batch
//     has been sent (or DelayFor elapsed). delay: hold for DelayFor while later batches pass.
//  4. While cut, the PUB socket is closed and every batch is dropped (the worker's replay ring still
//     holds them); at the end of the cut the PUB socket is bound again on the same address.
//  5. Replay: a request [id, "", seq8] on the ROUTER opens a DEALER to the worker's ROUTER and sends
//     ["", seq8] (the strict 3-frame request vLLM expects, which a ROUTER/DEALER broker with an identity
//     envelope would break); every answer goes back to id until the END marker or ReplayTimeout of
//     silence, after which the DEALER is closed.
package faultproxy
