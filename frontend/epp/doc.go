// Package epp makes kvroute an endpoint picker for Kubernetes inference gateways: an Envoy External
// Processing server (envoy.service.ext_proc.v3.ExternalProcessor) that speaks the Gateway API Inference
// Extension's endpoint picker protocol.
//
// # Overview
//
// The gateway (Envoy, or a gateway built on it) opens one Process stream per HTTP request and sends the
// request headers, the body, then the response headers and the response body as they pass. Server:
//
//  1. gathers the request body (BUFFERED: one message; FULL_DUPLEX_STREAMED: chunks, the headers held
//     until the body is complete; STREAMED / BUFFERED_PARTIAL: chunks, each answered CONTINUE);
//  2. runs the frontend's request path up to the decision (frontend.OpenAIAPI.Pick: parse, chat template
//     + tokenize, images, hash, route) — the same code and the same router core as kvroute frontend;
//  3. answers with the header x-gateway-destination-endpoint and the same key in the envoy.lb
//     dynamic-metadata namespace: "ip:port" of the picked worker, then Config.Fallbacks other candidates,
//     cheapest first ("ip:port,ip:port"); when the path added to the body (images' uuids, the cache
//     salt), the body is replaced too. In FULL_DUPLEX_STREAMED mode the body is sent back whole;
//  4. on the first response body chunk marks prefill done; counts SSE events as generated tokens; frees
//     the request at the response's end of stream (or trailers), and when the stream breaks first.
//
// Protocol details: the gateway's endpoint subset (filter metadata envoy.lb.subset_hint /
// x-gateway-destination-endpoint-subset) restricts the candidates (the decision's Only list, looked up
// in the server's index of workers by address, rebuilt when the fleet's version moves), and a subset
// with no known worker is a 503; the served endpoint the gateway reports (envoy.lb / x-gateway-destination-endpoint-served)
// moves the request's load when a fallback served it. A client error (bad JSON, unknown model) is an
// ImmediateResponse with the frontend's status and OpenAI error body. When no worker can take the
// request (503, or 429/529 from a queue limit) FailClose answers with that error and FailOpen lets the
// request continue without a destination (the gateway picks). Requests that are not OpenAI generate
// requests (GET, /v1/models, ...) continue untouched. Request headers sent twice, a request body
// before the headers or after its end of stream end the stream with InvalidArgument (a second pick
// would leave the first booked). Health answers grpc.health.v1 for "liveness", "readiness" and the ext_proc service name.
//
// # Concurrency model
//
// gRPC runs each Process stream on its own goroutine; the exchange (one request's state: headers, body,
// the Picked request) is owned by that goroutine. Shared state is atomic: the counters, the failure
// mode and the index of workers by address (a stream that finds it behind the fleet's version builds
// the next under a mutex, so streams meeting a change build it once). The router core is called directly (Pick, PrefillDone, Free are safe for concurrent use).
//
// # Ownership
//
// cmd/kvroute builds the Server, owns the gRPC server and its listener (TLS there), and feeds the router
// its workers (static flags, NATS discovery or an InferencePool, workers/k8spool). The router core is
// owned by actors/router; the request path by frontend.
//
// # Data flow
//
// gateway ─ext_proc─▶ Server.Process ─▶ frontend.Pick (parse → tokenize → images → route) ─▶ destination
// header + envoy.lb metadata ─▶ gateway proxies to the worker ─▶ response chunks ─▶ FirstToken, End.
package epp
