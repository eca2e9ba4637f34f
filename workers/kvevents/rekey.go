package kvevents

import "github.com/kvroute/kvroute/scoring"

// maxBlockMM bounds the images recovered per block on the stack; more spill to the heap.
const maxBlockMM = 8

// maxStackBlock is the largest block normalized in a stack buffer.
const maxStackBlock = 1024

// Rekey appends to dstLocal the router's local hash (scoring.BlockHash) of each
// block of a Stored event, so the caller can pair ev.BlockHashes[i] (the engine's opaque handle) with
// local[i]. Token chunks are cut at ev.BlockSize (blockSize when the event has none) and must hold
// exactly blockSize tokens: at the first chunk that does not, Rekey stops, and partial counts the
// remaining block hashes (Dynamo's "Block not published" rule, §5.2). seed is the LoRA/salt-derived seed
// (scoring.DeriveSeed).
//
// Blocks whose extra_keys carry multimodal identifiers in Dynamo's 64-hex form (§6.6) are hashed with the
// legacy sorted mm_hash suffix (§6.2), as Dynamo does when no image token id is configured; RekeyImages
// normalizes them to pad values instead.
func Rekey(ev *Event, blockSize int, seed uint64, dstLocal []uint64) (local []uint64, partial int) {
	return rekey(ev, blockSize, seed, 0, 0, false, dstLocal)
}

// RekeyImages is Rekey with Dynamo's router-side image normalization: in a block
// whose extra_keys name images, each maximal run of imageTokenID is replaced by scoring.PadValue of the
// block's k-th image (k advancing per run, clamped to the last image), and the block is hashed without
// mm suffix, so it matches a frontend request whose image positions were expanded to pad values.
//
// endTokenID, when non-zero, is the token that closes an image in the engine's prompt (Llama-4
// <|image_end|>, Pixtral [IMG_END]): k then advances there instead of after each run, because one image
// of several tiles or rows is several runs separated by structural tokens.
func RekeyImages(ev *Event, blockSize int, seed uint64, imageTokenID, endTokenID uint32, dstLocal []uint64) (local []uint64, partial int) {
	return rekey(ev, blockSize, seed, imageTokenID, endTokenID, true, dstLocal)
}

func rekey(ev *Event, blockSize int, seed uint64, imageTok, endTok uint32, normalize bool, dst []uint64) ([]uint64, int) {
	if ev.Kind != Stored || blockSize <= 0 {
		return dst, 0
	}
	step := ev.BlockSize
	if step <= 0 {
		step = blockSize
	}
	var mmBuf [maxBlockMM]uint64
	var tokBuf [maxStackBlock]uint32
	toks := ev.TokenIDs
	for i := range ev.BlockHashes {
		start := i * step
		end := min(start+step, len(toks))
		if start >= len(toks) || end-start != blockSize {
			return dst, len(ev.BlockHashes) - i
		}
		chunk := toks[start:end]
		var mm []uint64
		if i < len(ev.ExtraKeys) {
			mm = BlockMMHashes(ev.ExtraKeys[i], mmBuf[:0])
		}
		switch {
		case len(mm) == 0:
			dst = append(dst, scoring.BlockHash(chunk, nil, seed))
		case normalize:
			var norm []uint32
			if len(chunk) <= len(tokBuf) {
				norm = tokBuf[:len(chunk)]
			} else {
				norm = make([]uint32, len(chunk))
			}
			copy(norm, chunk)
			if endTok != 0 {
				NormalizeImageSpans(norm, imageTok, endTok, mm)
			} else {
				NormalizeImageRuns(norm, imageTok, mm)
			}
			dst = append(dst, scoring.BlockHash(norm, nil, seed))
		default:
			dst = append(dst, scoring.BlockHash(chunk, mm, seed))
		}
	}
	return dst, 0
}

// BlockMMHashes appends to dst the mm_hash of every multimodal extra key of one block, in order: an
// (identifier, offset) entry whose identifier is 64 hex digits yields its first 16 hex digits as a
// uint64; other identifiers (opaque uuids, "lora:hash") are ignored.
func BlockMMHashes(keys []ExtraKey, dst []uint64) []uint64 {
	for _, k := range keys {
		if k.Kind != ExtraMM {
			continue
		}
		if h, ok := ParseMMIdentifier(k.Str); ok {
			dst = append(dst, h)
		}
	}
	return dst
}

// ParseMMIdentifier returns the mm_hash of a 64-hex-digit identifier: its first 16 hex digits.
func ParseMMIdentifier(id string) (uint64, bool) {
	if len(id) != 64 {
		return 0, false
	}
	var h uint64
	for i := 0; i < len(id); i++ {
		var v byte
		switch c := id[i]; {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		if i < 16 {
			h = h<<4 | uint64(v)
		}
	}
	return h, true
}

// NormalizeImageRuns replaces, in place, each maximal run of imageTok in block with the pad value of
// mm[k], where k starts at 0 and advances after each run, clamped to the last entry. Runs beyond the
// number of images reuse the last one (Dynamo logs this mismatch at debug level).
func NormalizeImageRuns(block []uint32, imageTok uint32, mm []uint64) {
	if len(mm) == 0 {
		return
	}
	k := 0
	for i := 0; i < len(block); {
		if block[i] != imageTok {
			i++
			continue
		}
		pad := scoring.PadValue(mm[min(k, len(mm)-1)])
		for i < len(block) && block[i] == imageTok {
			block[i] = pad
			i++
		}
		k++
	}
}

// NormalizeImageSpans replaces, in place, every imageTok in block with the pad value of mm[k], where k
// starts at 0 and advances after each endTok, clamped to the last entry: the images of a structured
// layout (Llama-4 tiles, Pixtral rows), whose runs of imageTok are split by separators but whose end is
// marked. The block's extra keys list the images overlapping it in order, so the first is the one
// the block starts in.
func NormalizeImageSpans(block []uint32, imageTok, endTok uint32, mm []uint64) {
	if len(mm) == 0 {
		return
	}
	k := 0
	pad := scoring.PadValue(mm[0])
	for i, t := range block {
		switch t {
		case imageTok:
			block[i] = pad
		case endTok:
			if k < len(mm)-1 {
				k++
				pad = scoring.PadValue(mm[k])
			}
		}
	}
}

// CacheSalt returns the cache salt a BlockStored event's blocks were hashed with, or "". vLLM puts the
// request's cache_salt in the extra keys of the request's first block only, after the LoRA name and the
// multimodal entries, so it is visible only on an event without a parent;
// the blocks of a continuation inherit their parent's salt. Bare strings in that block are the LoRA name
// (when the event names one, first) and the salt (last). Older vLLM wrote multimodal identifiers as bare
// strings too: a block with such identifiers and no salt would be misread, which current vLLM (tuples)
// rules out.
func (e *Event) CacheSalt() string {
	if e.Kind != Stored || e.HasParent || len(e.ExtraKeys) == 0 {
		return ""
	}
	keys := e.ExtraKeys[0]
	first := true
	salt := ""
	for _, k := range keys {
		if k.Kind != ExtraString {
			continue
		}
		if first && e.LoraName != "" && k.Str == e.LoraName {
			first = false
			continue
		}
		first = false
		salt = k.Str
	}
	return salt
}
