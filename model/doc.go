// Package model loads what the router needs of a Hugging Face model directory and turns chat requests into the
// exact token ids the inference engine will see: the tokenizer (tokenizer.json), the chat template, and the config
// values of multimodal routing. No prefix ever matches if the router's ids differ from the engine's by one token,
// so exactness comes first and is tested against the reference implementation; speed comes second, and is what
// lets the router tokenize every request on its hot path.
//
// # Overview
//
//   - Load(dir) reads config.json, tokenizer.json, tokenizer_config.json, the chat template (chat_template.jinja,
//     chat_template.json or tokenizer_config.json["chat_template"], in that order), preprocessor_config.json and
//     generation_config.json. Resolve(name) finds a model in the HF hub cache; nothing is ever downloaded.
//   - Tokenizer is BPE as HF tokenizers does it: added tokens split out first (leftmost-longest, a byte trie), then
//     the normalizer (NFC, Prepend, Replace, ...), the pre-tokenizer, the BPE model (byte-level, or SentencePiece
//     style with byte fallback), and the post-processor only on request (EncodeSpecial).
//   - ChatTemplate renders Jinja with gonja under transformers' conventions (trim_blocks, lstrip_blocks, a
//     Python-compatible tojson, raise_exception). Image parts reach the template as {"type": "image"}, so the
//     fixture template (Qwen3-VL) emits <|vision_start|><|image_pad|><|vision_end|> (151652, 151655, 151653).
//   - Model.EncodeChat = render + tokenize through a SegmentCache.
//
// # Exactness
//
// The corpus in testdata/tokenizers (3,300 strings: every script, contraction case, white-space run and special
// token the issue lists) is encoded by @huggingface/tokenizers (scripts/tokenizer-oracle) for Qwen3, Llama-3 and
// Llama-2; TestGoldenOracle asserts 100 % id equality and decode equality. Chat templates are compared with Jinja2
// renderings (scripts/gen-template-golden.py). Fuzz targets check that no input panics and that valid UTF-8
// round-trips.
//
// # Speed
//
// The split pattern of Qwen, Llama-3 and GPT-4 needs lookahead, which Go's regexp lacks; the general regex engine
// (regexp2) is exact but slow, so the known patterns have a hand-written splitter (gpt4Splitter) that follows the
// regex alternative by alternative over a per-rune class table, and regexp2 serves only unknown patterns. BPE
// merges look up pairs in an open-addressing table; words of up to 48 symbols merge by array scan, longer ones
// (a CJK sentence is one word) with a heap. A word cache (two-way set associative, lock-free) skips BPE for words
// seen before, which is nearly all words of a warm router. NFC runs only around characters that may change.
//
// Long conversations: added tokens split a chat prompt into segments (each message body sits between
// <|im_start|>role and <|im_end|>), and a segment's ids never depend on its neighbors, so the SegmentCache keeps
// ids per segment text and a 100k-token conversation with one new turn tokenizes only that turn. Rendering the
// template then dominates: gonja costs ~10 µs per message. Known templates (the fixture's and Qwen3's, matched by the
// SHA-256 of the source) have a native renderer in Go, tested byte-equal to gonja on random conversations; every
// other template renders through gonja.
//
// # Concurrency model
//
// Model, Tokenizer and ChatTemplate are immutable after loading and safe for concurrent use. The only mutable
// state is in caches: the word cache (atomic pointers to immutable entries; a lost race costs a recomputation),
// the SegmentCache (one mutex held for a map probe), and pooled scratch buffers (sync.Pool).
//
// # Ownership
//
// The frontend owns one *Model per served model and calls EncodeChat (or RenderChat then Tokenizer.Encode) on
// its request goroutines. Slices returned by Encode* belong to the caller; the caches keep their own copies.
//
// # Data flow
//
//	OpenAI messages ([]Message) --Render--> prompt text --added-token split--> segments
//	    segment --SegmentCache hit--> ids
//	    segment --miss--> normalize --> pre-tokenize (words) --> word cache / BPE --> ids --> SegmentCache
package model
