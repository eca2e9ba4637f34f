// Package registry describes backend workers: the Spec a user gives on the command line
// (`--worker id=1,url=...,events=tcp://...`) or registers at run time as JSON, its parsing and validation.
//
// # Overview
//
// A Spec names a worker (its u64 id), where its OpenAI API lives, where its vLLM KV events are published
// (and the replay endpoint), and the engine facts the router needs (block size, KV capacity, data-parallel
// size, token budget, device class). The same fields are accepted in both forms so a flag and a JSON body
// describe a worker identically.
//
// # Concurrency model
//
// Specs are values; nothing here holds state.
//
// # Ownership
//
// cmd/ parses flags into Specs; the frontend parses JSON bodies into Specs; the worker actors own the
// running mirror of each Spec.
package registry
