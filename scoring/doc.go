// Package scoring holds kvroute's pure routing logic: no goroutines, no I/O, no clocks.
//
// # Overview
//
// Block hashing (hash.go) reproduces NVIDIA Dynamo bit for bit (spec/hashing.md): a local block hash is
// XXH3-64 over the block's tokens as u32le (plus the sorted legacy mm_hash suffix) with seed 1337 or the
// LoRA/salt-derived seed; sequence hashes chain local hashes with seed 1337; pad values stand in for image
// positions in routing tokens. Sub-packages hold the prefix index (scoring/prefix), active-sequence load
// tracking (scoring/load) and queue policies (scoring/queue).
//
// # Concurrency model
//
// Nothing here is safe for concurrent mutation; every value has one owner (an actor in actors/ or a test),
// and functions are pure where they can be.
//
// # Ownership
//
// Request hashing and event re-keying both go through LocalBlockHashes / BlockHash, so router and engine
// views can never drift apart.
package scoring
