// Package openai is the OpenAI API surface of the frontend: request types for /v1/chat/completions and
// /v1/completions with their validation, the error classes of a bad request, the response and SSE
// shapes, and byte-level edits of a body that must be forwarded as it came.
//
// # Overview
//
//  1. Parse (request.go): ParseChat / ParseCompletion decode with go-json into typed requests (messages
//     straight into model.Message, so the tokenizer takes them without a copy; the prompt union
//     string | []string | []int | [][]int; stop string | []string; nvext; vLLM extras the router
//     reads). Syntax and type errors come back as 400s naming the field as the API spells it
//     ("messages[2].content[0].text"). Fields the router does not read are not decoded at all: they stay
//     in Body.
//  2. Validate (validate.go): values, in a fixed order: body size (413), model (missing 400, not served
//     404), sampling ranges, then messages (empty, too many: 413, unknown role, content part types,
//     media without url or uuid) or the prompt (empty, batched: 422, too many tokens: 413), tools and
//     tool_choice, response_format. Unsupported-but-valid requests (n > 1, best_of, beam search,
//     prompt embeddings) are 422. Limits holds the bounds (DefaultLimits). DecodeChat /
//     DecodeCompletion do both steps.
//  3. Errors (errors.go): ErrBadRequest, ErrNotFound, ErrTooLarge, ErrUnprocessable, ErrUnavailable are
//     the classes frontend maps to statuses (frontend/errors.go uses these same values); *Error adds
//     the param for OpenAI's error.param.
//  4. Raw-body edits (media.go, wire.go): a non-allocating JSON scanner (workers/oaiwire, below the
//     worker client that reads usage with it) gives positions the decoder does
//     not; SetMediaUUIDs adds or replaces the "uuid" of media parts (the mm identity the worker's KV
//     events will carry), RewriteMedia does that and also replaces a part's URL (an image inlined as
//     a data: URI) and adds a member (the mm_kwargs descriptor) in the same pass, SetField / DeleteField change one top-level member (e.g. "nvext" on a worker
//     response), TopLevelField reads one. Every byte not being changed is copied as it came.
//  5. Responses (response.go): ChatCompletion, ChatChunk, Completion, Usage with
//     prompt_tokens_details.cached_tokens, the nvext routing explanation, SSE framing (AppendSSE,
//     AppendSSEError, SSEDone) and ParseUsage for a worker's body or chunk.
//
// # Concurrency model
//
// None: pure functions and plain values. A parsed request is owned by the request that parsed it.
//
// # Ownership
//
//   - Body: ParseChat/ParseCompletion keep the slice they are given (no copy) in Common.Body and in the
//     positions of ChatRequest.Media. The caller copies it out of fasthttp.RequestCtx first (the
//     context is recycled) and never modifies it afterwards.
//   - Edit functions return new slices; their input is not modified.
//
// # Data flow
//
//	ctx.PostBody() ─copy─▶ DecodeChat(body, limits, served) ─▶ *ChatRequest
//	  Messages, ChatOptions() ─▶ model.EncodeChat (template + tokenize)
//	  Media (url, uuid) ─▶ images stage ─▶ mm hashes ─▶ RewriteMedia(Body, Media, uuids, urls, …) ─▶ forwarded body
//	  CacheNamespace(), PriorityJump(), NVExt.BackendInstanceID ─▶ hashing / queue / routing
//	worker response or chunk ─▶ ParseUsage (cached_tokens) · AddNVExt when return_routing
//
// The package never decides a status: frontend does, from the error class.
package openai
