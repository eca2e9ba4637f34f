// Package oaiwire holds the OpenAI JSON that both ends of a worker connection read: a non-allocating
// scanner over a raw body (TopLevelField, SetField, DeleteField and the walkers under them) and the usage
// object (Usage, ParseUsage).
//
// # Overview
//
// The frontend's request and response shapes live in frontend/openai; the worker client
// (workers/client) sits a layer below the frontend and still has to read a worker's usage and spot an
// error member in a stream chunk. What both read is here, so every import points down: frontend/openai
// and workers/client import this package, and it imports only the standard library and the JSON decoder.
//
// # Concurrency model
//
// Pure functions over byte slices; safe from any goroutine. Nothing is retained.
//
// # Ownership
//
// The caller owns the bytes; TopLevelField returns a sub-slice of them (no copy), SetField and
// DeleteField return fresh slices (DeleteField returns b itself when nothing is removed).
//
// # Data flow
//
//	request body ─▶ frontend/openai (EachField, FindField: media parts, uuids) ─▶ worker
//	worker response or chunk ─▶ workers/client (ParseUsage, TopLevelField "error") ─▶ frontend
package oaiwire
