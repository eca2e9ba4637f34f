// Package mm holds the image side of multimodal KV routing: the identity of an image (mm_hash), the
// discovery of its size, the number of placeholder tokens it becomes for a model family, and the
// routing view of a request in which every image position carries its image's pad value.
//
// # Overview
//
// A request with images routes on its images, not only on its text, when the same image leads to the
// same block hashes on the router and in the engine's KV events. The frontend computes, per image:
//
//  1. identity: HashURL (XXH3-64, seed 0, of the WHATWG-serialized URL, query kept; for a data: URI of
//     its decoded payload, whatever the MIME label), or with --frontend-decoding the content hash of
//     the decoded pixels
//     (ContentHash, via Resolver.Resolve's Prober.decode);
//  2. size: Prober.Size, from a cache keyed by mm_hash, else a Range request (0-4095, then 0-65535,
//     then for JPEG with large metadata further within a bound), 206 only, SSRF-guarded; data: URIs
//     are read in memory. Every URL read of the package (these ranges, Fetch, decode) goes through one
//     guarded GET, Prober.send in fetch.go: the guard and request counter cannot drift apart;
//  3. token count: CalculateNumTokens(W, H, family, preprocessor config), a port of llm-multimodal
//     1.7.0 per family (Qwen2/2.5-VL, Qwen3-VL/3.5/3.6, LLaVA-1.5, LLaVA-NeXT, Llama-4, Kimi-K2.5/K2.6,
//     Phi-3-vision, Pixtral); for Llama-4 and Pixtral the length of vLLM's structured replacement
//     (layout.go: tiles or rows of embedding tokens between structural tokens), which Spec.AppendImage
//     writes. Phi-3-vision, Kimi-K3, Phi-4-multimodal, Qwen3-Omni, Inkling, Qwen3-ASR and
//     Nemotron-Nano-Omni are detected but not routed (FallbackUnsupportedFamily).
//
// then Expand replaces each placeholder token (Spec.ImageTokenID) of the worker-bound tokens with
// NumTokens copies of the image's pad value (scoring.PadValue), prepends the BOS when the model's rule
// says so and zero-pads to a block multiple. The routing tokens are hashed with scoring.LocalBlockHashes
// like text; the worker-bound tokens are not changed. Workers receive the ids (Hash.HexID, or
// Hash.VLLMUUID for vLLM) so that their KV events name the same images; workers/kvevents re-keys those
// events (RekeyImages) with the same pad values. BlockMMInfos builds the legacy block_mm_infos side
// channel instead, for engines that take neither uuids nor pad values.
//
// RouteLegacy builds the same request in Dynamo's block_mm_infos scheme (the engine's prompt plus,
// per block, the mm_hash values of the images overlapping it), for fleets whose workers are registered
// with mm_scheme=block_mm_infos.
//
// Anything missing or inconsistent gives a FallbackReason and the request routes on its text prefix
// only; tokens and forwarded ids are produced together or not at all.
//
// # Use from the request path
//
// At startup, per model:
//
//	spec, err := mm.LoadSpec(modelDir, servedModelID)   // or mm.Detect(mm.ModelInfoFrom(m, id))
//	if !spec.Enabled { log spec.Disabled }               // every request then gets FallbackUnknownModel
//	prober, err := mm.NewProber(probeCfg, nil, nil)      // one per process (nil: the wall clock); Close at shutdown
//	resolver, err := mm.NewResolver(spec, prober, resolveCfg)
//
// Per request (parts = image_url parts in prompt order across messages):
//
//	images, reason := resolver.Resolve(ctx, parts, scratch)
//	if reason == mm.FallbackNone {
//		routing, reason = resolver.Route(buf, tokenIDs, images, blockSize, limits)
//	}
//	if reason != mm.FallbackNone { count reason.String(); hash tokenIDs; forward no ids }
//	else { hash routing.Tokens; forward routing.HexIDs() / routing.VLLMUUIDs() }
//
// # Concurrency model
//
// Resolver is stateless and shared by all request actors. Resolve runs inline when every size is
// cached (the common case: no goroutine, no channel) and otherwise starts one goroutine per missing
// image, bounded by ResolveConfig.MaxImages, and joins them before returning. Prober owns two pieces
// of shared state: the size cache (16 shards, each a map and an LRU list under its own mutex) and the
// in-flight map (one mutex). A miss starts one fetch goroutine per mm_hash in the Prober's
// routine.Group (kind mm.size-probe: counted, pprof-labelled); every caller for that hash waits on the flight's
// done channel or on its own ctx. The fetch is bounded by ProbeConfig.Timeout, not by a caller's
// ctx, so one cancelled request does not fail the others sharing it. Close refuses new fetches and
// waits for those in flight.
//
// Whole downloads (--frontend-decoding, Fetch for --mm-transfer) share two process-wide counting
// semaphores, Prober.fetching (bytes downloaded and held, ProbeConfig.MaxFetchBytesInFlight) and
// Prober.decoding (pixels being decoded, MaxDecodePixelsInFlight). A download reserves its bytes after
// the response headers and before reading the body, waiting at most ProbeConfig.FetchBudgetWait
// (ErrBusy after), and holds them until its image is decoded; its decode then waits for pixels as long
// at most (ErrBusy after). It never waits for bytes while holding pixels, so the two cannot deadlock. One request's downloads also share a requestBytes count
// (ResolveConfig.MaxRequestBytes), added to as they read.
//
// # Ownership
//
//   - sizeCache: written by fetch goroutines (put) and by readers (get moves the entry to the front),
//     always under the shard mutex.
//   - Prober.inflight and Prober.closed: under Prober.mu.
//   - flight.size / flight.err: written once by the fetch goroutine before close(done), read by
//     waiters only after done.
//   - Spec, ProbeConfig, ResolveConfig, Guard: immutable after construction.
//
// # Data flow
//
//	image_url parts ──HashURL──▶ mm_hash ──Prober.Size (cache │ Range GET)──▶ (W, H)
//	        └─ --frontend-decoding: Prober.decode (download, header, decode) ──▶ content hash, (W, H)
//	(W, H) ──Spec.NumTokens──▶ N ──Expand(tokens, find, entries, BOS, bs)──▶ Routing
//	Routing.Tokens ──scoring.LocalBlockHashes──▶ overlap query;  Routing.Hashes ──▶ worker uuids
//
// # Security
//
// The size probe fetches URLs chosen by clients. Guard refuses loopback, private, link-local, CGNAT,
// documentation, multicast and metadata destinations (IPv4 and IPv6) unless --media-allow-hosts
// names them. The check runs on the resolved address at connect time (net.Dialer.Control), so DNS
// rebinding and redirects (at most 3, each re-checked) cannot reach them; environment proxies are not
// used. A non-206 reply is closed without reading its body; no more than the requested range is read.
// A whole download reads at most its image's, its request's and the process's byte bounds, and a
// declared Content-Length past one is refused before the body is read. Before a downloaded image is
// decoded, DecodableSize checks its header against MaxDecodePixels and plausibleSize its file: a PNG or
// GIF too small for its pixels, a JPEG with more scans than MaxJPEGScanBlocks allows (each costs a pass
// over the image); the decode is charged decodeCost in the process's pixel budget.
//
// Guard.CheckURL screens a URL that is not fetched here but forwarded to a worker that fetches it: the
// host is read as the WHATWG parser (and glibc) reads it, so numeric IPv4 forms are addresses, a host
// name is resolved and every address checked, and what parsers read differently (userinfo, a backslash
// in the authority, a host that does not resolve) is refused. The frontend runs it on every media URL,
// and the simulated worker (workers/mocker) fetches through the same Guard (DialContext).
package mm
