// Package kvevents speaks vLLM's KV-cache event plane: the msgpack wire format,
// decoded and encoded, the ZMQ subscribers that feed the router, and a vLLM-compatible publisher for
// tests and the mocker.
//
// # Overview
//
//   - types.go: Batch, Event (Stored, Removed, Cleared), ExtraKey, Layout, ErrMalformed.
//   - decode.go, msgpack.go: Decode, a hand-written zero-copy msgpack decoder (msgpack.go holds the
//     bounded primitive reader). It accepts the current layout
//     (positional batch [ts, events, dp_rank] with tagged-map events, "type" key, unknown keys ignored),
//     the legacy one (tagged-array events of any length at least the required fields, including v0.9's
//     6-element BlockStored and 2-element batches) and a map-shaped batch. Hashes may be ints (negative
//     i64 reinterpreted as u64) or bin (low 8 bytes, big-endian: vLLM's int form). A parent hash of 0 is
//     "no parent" (llm-d-inference-sim, llm-d's adapter). medium is parsed into a storage tier
//     (Event.Tier, scoring.Medium). Unknown event tags are
//     skipped and counted. Errors wrap ErrMalformed; no input panics, and every length read from the
//     input is capped by the bytes that remain, so allocation is bounded by the payload size.
//   - encode.go: AppendBatch, byte-exact msgspec output (§3.3, §11) in LayoutMap or LayoutArray, checked
//     against the dumps of §4 (testdata/*.hex, written by testdata/gen_fixtures.py independently of the
//     Go encoder).
//   - dialect.go: Dialect and AppendDialect: how each family of publishers writes the format (current
//     vLLM, its array layout, v0.9, llm-d-inference-sim, SGLang), with a golden payload per dialect in
//     testdata/ (gen_fixtures.py, from the public formats).
//   - rekey.go: Rekey / RekeyImages turn a Stored event into the router's local block hashes
//     (scoring.BlockHash over each block's token_ids), stopping at the first short block (Dynamo's
//     "Block not published"); RekeyImages also replaces image-token runs with pad values recovered from
//     64-hex extra_keys identifiers; with an end token (Llama-4
//     <|image_end|>, Pixtral [IMG_END]) every run up to it takes the same image's pad
//     (NormalizeImageSpans), since a tiled image is several runs.
//   - trtllm.go: TensorRT-LLM's JSON event list (KVCacheEventSerializer layout, per-block mm_keys):
//     DecodeTRTLLM and AppendTRTLLM (LayoutTRTLLM). The stream tells a JSON payload from msgpack by its
//     first byte ('['), so one subscriber reads both.
//   - seq.go: seqTracker, the pure sequence state machine (gaps, duplicates, restarts).
//   - stream.go, subscriber.go, bind.go: Subscriber (connect mode: dial one worker's PUB) and
//     BindSubscriber (bind one SUB; workers' PUBs connect; batches attributed by topic).
//   - publisher.go: Publisher, vLLM's ZmqEventPublisher behaviour: bind-vs-connect heuristic
//     (ShouldBind), seq from 0, replay ROUTER over a bounded ring, END marker.
//
// # Concurrency model
//
// Decode, AppendBatch, Rekey and seqTracker are pure and single-threaded: one owner per Batch.
//
// A Subscriber, a BindSubscriber and a Publisher each do all their socket work in the goroutine that
// calls Run; the caller starts that goroutine (through its tracked helper) and stops it by cancelling the
// context. pebbe/zmq4 sockets are not thread-safe and closing one from another goroutine crashes the
// process, so no socket ever leaves its Run goroutine: sockets are opened inside Run and closed by Run's
// defers before it returns. A replay exchange runs inline on the subscriber goroutine; live messages wait
// in the SUB queue meanwhile (up to RcvHWM).
//
// A subscriber waits for messages on Go's netpoller, through a dup of the SUB socket's ZMQ_FD (wait.go),
// not in a blocking zmq_poll cgo call that would hold a thread and a P while idle. With a monitor socket,
// one helper goroutine per session waits on the monitor's ZMQ_FD dup and only wakes the Run goroutine:
// it never calls into libzmq. Where the netpoller refuses the descriptor, the loop falls back to zmq_poll.
//
// Handlers run on the subscriber goroutine, in sequence order; a slow handler back-pressures the SUB
// queue. The *Batch handed to OnBatch is reused after the handler returns: copy what you keep.
//
// The SUB socket's monitor PAIR socket is opened and closed in the same session as the SUB socket.
//
// Cross-goroutine reads: counters are atomics (Stats, Counters); the BindSubscriber's topic registry is
// an immutable map (internal/cowmap, 64 parts: a change copies one) swapped through an atomic.Pointer
// (AddTopic / RemoveTopic serialize on a mutex and list the topic they changed), and Run, at its next
// message, reconciles only the streams of the changed topics;
// Publisher.Publish hands encoded payloads to Run through the bounded channel "kvevents.publish"
// (QueueSize, default 1024, depth in PublisherStats.QueueDepth) and blocks when it is full, as vLLM's
// scheduler blocks on its queue.
//
// # Ownership
//
//   - SUB socket, DEALER replay sockets, per-stream seqTracker and decode Batch: the subscriber's Run
//     goroutine.
//   - PUB socket, ROUTER replay socket, sequence counter and replay ring: the publisher's Run goroutine.
//   - Counters: written by the Run goroutine, read by anyone.
//   - What a batch means for the index (refcounts per dp_rank, re-keyed blocks): the consumer, i.e. the
//     worker actor (actors/worker), never this package.
//
// # Data flow
//
//  1. SUB receives [topic, seq_be8, payload]; a message of another shape counts as a decode error.
//  2. BindSubscriber only: the topic picks the worker's stream; unregistered topics are counted
//     (UnknownTopics), shown to OnUnknownTopic and dropped. Each message names the connection it came on
//     (libzmq's "__fd" message property, mapped to the connection's ordinal by the monitor's accepted
//     events, read before the message), so a stream with replay verifies its publisher's identity, as
//     in step 3, before the first live batch that came on another connection than its last: a
//     restarted engine's stream verifies, the rest of the fleet does not (TestBindVerifiesOnlyTheReconnected;
//     before, every connect made every stream ask, one round trip each on this goroutine: 454–484 ms
//     per connect at 128 workers, BenchmarkBindConnect). A message that names no connection falls back
//     to verifying after any handshake the monitor reported since the stream last looked. Bind mode has
//     no join probe (step 3): it would replay topics whose engine may not be up yet, and each silent
//     replay stalls every worker's stream for ReplayTimeout. A batch dropped before our subscription
//     reached a newly connected publisher is recovered at that worker's next batch (its seq shows the
//     gap), not before.
//  3. Subscriber only: each time the SUB socket (re)connects (a socket-monitor PAIR reports the
//     handshake), the stream catches up before reading on. The reader reads the monitor before every SUB
//     message, not only when the helper wakes it: the handshake event is queued before any message of
//     its connection, so the catch-up always precedes them (TestConnectPrecedesItsMessages); a new
//     engine's batch read first, under our last+1, would pass as in order. A fresh stream replays everything buffered
//     from 0 (ZMQ's slow-joiner window and the router starting after the worker). A stream that has
//     state replays from its last seq and checks that the publisher still holds the same payload under
//     it (xxh3 digest): if so the outage is filled in; if not, the engine restarted while we were away
//     (possibly already past our last seq, which the live sequence alone would take for a gap): OnReset,
//     then replay from 0. The handshake completes before our subscription reaches the PUB socket, so a
//     batch published just after it can still be dropped; when the worker then goes quiet no later seq
//     shows the gap. The catch-up therefore runs again one poll interval later, then at doubling
//     intervals (up to IdentityCheck), until the first live message of the connection proves the
//     subscription (joinProbe; TestSlowJoinerLastBatchIsCaughtUp).
//  4. A live seq at or below the last consumed one is first judged by content: the stream remembers
//     the payload digests of its last 64 seqs; the same payload is a duplicate (dropped, Duplicates),
//     another payload under a consumed seq is a new incarnation of the engine (OnReset, then replay
//     from 0 when there is replay), even when its seq equals ours. Then seqTracker classifies the seq: in order → deliver; nothing seen yet and seq > 0 → replay
//     from 0; gap → replay from last+1; seq ≤ last inside the window a replay already covered →
//     duplicate, dropped; otherwise backwards → engine restart: OnReset, then as if nothing had been
//     seen. With replay, an ambiguous seq (a gap, or a step backwards outside the window) is first
//     settled by the same identity check as the catch-up.
//     A restart the publisher confirmed also discards what the SUB socket still holds (connect mode):
//     the old engine's last batches can sit there behind a replay that waited out the dead engine, and
//     one whose seq happens to be the new engine's last+1 would read as in order. The new engine's
//     batches among them come back with the replay from 0. A live batch that a completed replay, asked
//     after the batch arrived, does not hold is an earlier incarnation's too (vLLM appends every batch to
//     its ring before it serves the next replay request) and is dropped (Stale).
//  5. Replay: DEALER sends ["", start_seq8]; the publisher's ROUTER answers [ "", seq8, payload ] per
//     buffered batch with seq ≥ start, then [ "", ff×8, "" ]. Replayed batches newer than last are
//     delivered in order. Silence longer than ReplayTimeout abandons the replay and recreates the DEALER
//     (late answers cannot leak into the next replay). An answer cut short (the ROUTER drops silently
//     past its send HWM, 1000 messages by default, so a long replay to a slower reader loses a stretch
//     or its tail) shows as two answered seqs that do not follow each other, or as silence; the rest is
//     asked for again from the first missing seq while each answer brings something new. Sequence
//     numbers never delivered are counted as Lost.
//  6. Decode into the stream's reused Batch (a malformed payload consumes its seq and counts as a decode
//     error), count events and short stored blocks, call OnBatch(seq, b).
//  7. The consumer applies stored/removed/cleared in order and calls Rekey / RekeyImages for stored
//     blocks.
//
// # Decoder choice
//
// Chosen by benchmark (BenchmarkDecode, decode_bench_test.go): the hand-written zero-copy decoder against
// the same Batch filled through vmihailenco/msgpack/v5's streaming Decoder (decode_vmihailenco_test.go;
// kept in a test file, checked equivalent by TestVMDecoderAgrees). One op decodes one batch of E
// BlockStored events of B blocks × 16 tokens; AMD EPYC, 2 shared cores, go1.26, best of 3 runs
// (the machine was shared; the ratio held in every run):
//
//	layout  E×B    hand ns/op  events/s  allocs   msgpack/v5 ns/op  events/s  allocs   speed-up
//	map     1×1        254     3.9 M      0         1 895            0.53 M    14        7.5×
//	map     8×4      3 137     2.6 M      0        28 475            0.28 M   112        9.1×
//	map     4×64    17 109     0.23 M     0       160 947            0.025 M   56        9.4×
//	array   1×1        248     4.0 M      0           878            1.1 M      3        3.5×
//	array   8×4      2 742     2.9 M      0        16 655            0.48 M    24        6.1×
//	array   4×64    16 339     0.24 M     0       132 902            0.030 M   12        8.1×
//
// The hand-written decoder wins by 3.5–9× and makes no allocation in steady state (strings such as
// "GPU" and repeated mm identifiers are interned per Batch); it is the one Decode uses. Its token loop
// has a fast path for fixint/uint16/uint32, which covers every real vocabulary (~1 GB/s on 64-block
// events). Encoding (BenchmarkEncode) runs at 2.7 M events/s (map, 8×4, 0 allocs), and the whole path
// PUB → loopback TCP → SUB → Decode → handler (BenchmarkPubSub) at ~160 k events/s (20 k batches/s of
// 8 events) on the same two cores. Figures and commands are in docs/benchmarks.md.
//
// # Not covered
//
// Hashes that arrived as bin are re-encoded as ints (the value vLLM's int mode would send). Event fields
// newer than session_id are skipped on decode and not re-encoded. The publisher does not apply vLLM's DP
// port offset; give each rank its own endpoint.
package kvevents
