// Package transfer hands preprocessed images (vLLM's mm_kwargs) from the frontend to the chosen worker,
// so the worker skips fetching and preprocessing them: Dynamo's chat-processor variant,
// with kvroute's own wire format.
//
// # Overview
//
//  1. Selection (mode.go). ResolveMode(flag, getenv) once at startup: DYNAMO_DISABLE_NIXL_MM=1 means
//     off; else --mm-transfer shm|net|off; else KVROUTE_MM_TRANSFER; else DYNAMO_MM_TRANSFER ("nixl" is
//     accepted for net); else off.
//  2. Preprocessing (preprocess.go, resize.go). Processor.Preprocess decodes PNG, JPEG, GIF (first
//     frame) or WebP, converts to RGB (alpha composited over white, HF convert_to_rgb), resizes to
//     mm.SmartResize's size (the size the router's token count assumes), rescales by 1/255,
//     normalises with image_mean / image_std and lays out pixel_values and image_grid_thw (Layout).
//  3. Handoff (sender.go). Sender.Prepare(ctx, Source, mm.Hash) → (Descriptor, release, error): shm
//     writes one segment per image; net copies the item into a registered buffer of the Agent.
//     The descriptor rides in the image's content part as "mm_kwargs" (Wire format). release runs
//     when the worker's response has ended, however it ended.
//  4. Worker (receive.go). Receiver.Receive(ctx, Descriptor) reads the segment or pulls the buffer,
//     verifies header, shape, mm_hash and the XXH3-64 checksum, and acknowledges a pull. Every error
//     means "use the URL": ErrUnavailable (other node, released, agent down), ErrRefused (used or
//     wrong token, expired), ErrCorrupt, ErrBadDescriptor. workers/mocker does exactly that and counts
//     shm / net / fallback_url.
//
// # Layout
//
// For a still image resized to H×W with patch p, merge m and temporal patch tp (Qwen3-VL: 16, 2, 2):
//
//	image_grid_thw = [1, H/p, W/p]                          (gt = 1: one frame tiled to tp frames)
//	pixel_values   = float32 [gt·(H/p)·(W/p), 3·tp·p·p]     (Qwen3-VL 1920×1080: [8160, 1536])
//
// exactly HF's Qwen2VLImageProcessor: the frame (C, H, W) is tiled to (tp, C, H, W), reshaped to
// (gt, tp, C, H/p/m, m, p, W/p/m, m, p) and transposed (0, 3, 6, 4, 7, 2, 1, 5, 8). So rows run over
// merge blocks in raster order and, inside a block, over its m×m patches in raster order: row
// ((bh·(W/p/m) + bw)·m + mh)·m + mw is the patch at patch-row bh·m+mh, patch-column bw·m+mw. A row's
// columns are channel-major, then frame, then the p×p pixels in raster order: column
// ((c·tp + t)·p + y)·p + x. The two frames of a still image are identical. Rows / m² is the number of
// placeholder tokens (mm.CalculateNumTokens).
//
// Exactness. The resize is Pillow's BICUBIC resample for 8-bit RGB re-implemented with the same
// fixed-point arithmetic (22-bit weights, uint8 rounding after each pass), so its bytes equal
// Pillow's (tested against Pillow 9.4 output); rescale and normalise use HF's slow-processor arithmetic
// (float64 v·(1/255) cast to float32, then (x − mean) / std in float32), so pixel_values equal the
// slow processor's bit for bit given the same RGB input (tested against numpy). Differences remain in
// decoding: Go's JPEG IDCT and chroma upsampling can differ from libjpeg by a level; alpha
// compositing uses exact rounding where Pillow's alpha_composite uses a fixed-point approximation
// (equal on the tested values). HF's fast processor (torchvision, the default for Qwen3-VL) fuses
// rescale and normalise and so can differ from the slow one in the last bit of a value; that variant
// is not reproduced here.
//
// # Wire format
//
// Descriptor, as the "mm_kwargs" member of the image_url content part (the frontend adds it next to
// "uuid"; the part keeps its url for the fallback):
//
//	{"kind":"shm","name":"kvroute_mm_<pid>_<12 hex>","length":N,"dtype":"float32",
//	 "shape":[rows,cols],"grid_thw":[1,gh,gw],"mm_hash":"<16 hex>","checksum":"<16 hex>"}
//	{"kind":"net","addr":"host:port","buffer":3,"token":"<32 hex>","length":N, ...same fields}
//
// No released engine reads the descriptor; workers/mocker does, and scripts/mm_kwargs_reader.py is a
// reference reader in Python (standard library plus Debian's python3-xxhash) for a worker-side wrapper,
// tested against Sender in python_reader_test.go.
//
// Item (segment content, or pulled bytes): a 64-byte little-endian header — magic "KVMM", version 1,
// dtype 1 (float32), ndim 2, rows, cols, grid_thw, mm_hash, XXH3-64 of the payload, payload length —
// then the payload (tensor.go). Pull protocol: agent.go.
//
// # Security
//
// A descriptor is a capability: a shm name has a 48-bit random suffix and a net token 128 random bits,
// and neither is shown to clients. The frontend must therefore drop or refuse any "mm_kwargs" a client
// sends (it would otherwise choose the address a worker dials). Receivers open only names matching
// kvroute_mm_<pid>_<12 hex> in their shm directory (no path escapes), bound the allocation by
// Receiver.MaxBytes before reading, and use nothing that fails verification. Segments are created 0600:
// frontend and workers must run as the same user to share them.
//
// # Concurrency model
//
// Sender is shared by all request actors; Prepare preprocesses without any lock (the costly part) and
// takes Sender.mu only to record a live segment. The Agent's slots, free list, counters and open
// connections are under Agent.mu; a buffer is filled outside the lock while its slot is reserved
// (invisible to pulls). Each accepted pull runs in its own goroutine; it, the accept loop, the agent's
// TTL sweep and the shm janitor are started in the Agent's or the Sender's routine.Group (kinds
// transfer.agent-pull, transfer.agent-accept, transfer.agent-sweep, transfer.shm-janitor: counted on
// /metrics, pprof-labelled), which Close stops and joins.
//
// # Ownership
//
//   - A segment belongs to the process whose pid is in its name: that Sender unlinks it on release or
//     Close; workers only read it. After a crash, any Sender's janitor (at start and every minute)
//     removes segments of dead pids, and any segment older than JanitorTTL (10 min).
//   - A buffer belongs to the Agent. It is freed on the first of: the worker's ack, the sender's
//     release, the TTL (60 s, Agent.Sweep with the injected clock), Close. A slot generation stops a
//     late release from freeing a reused slot; a one-time token stops replays.
//   - A received Tensor belongs to the caller (its Data never aliases a segment or a buffer).
//
// # Data flow
//
//	request actor ──(concurrently with routing)── Sender.Prepare ─┬─ shm: /dev/shm/kvroute_mm_<pid>_<rand>
//	                                                             └─ net: Agent slot + token
//	part["mm_kwargs"] = Descriptor ──▶ worker ──Receive──▶ verified tensor │ error ──▶ fetch URL
//	response ends ──▶ release (unlink │ free buffer)
package transfer
