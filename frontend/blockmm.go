package frontend

import (
	"github.com/kvroute/kvroute/scoring"
)

// blockMMInfo is one block's entry of Dynamo's block_mm_infos side channel (spec hashing §6.1–6.2):
// the multimodal objects overlapping the block. Only mm_hash enters the block hash; offsets are
// accepted and ignored, as in Dynamo.
type blockMMInfo struct {
	MMObjects []struct {
		MMHash  uint64     `json:"mm_hash"`
		Offsets [][2]int64 `json:"offsets"`
	} `json:"mm_objects"`
}

// maxMMObjectsPerBlock bounds the images one block may name: a block of 16 tokens can overlap at most
// 16 images, and the bound keeps a hostile body from making hashing quadratic.
const maxMMObjectsPerBlock = 64

// legacyMMHashes hashes tokens with the block_mm_infos side channel (Dynamo's legacy scheme: each
// block's tokens followed by its images' mm_hash values sorted, as u64le), the hashing of engines that
// take neither uuids nor pad values and whose KV events name images per block (TensorRT-LLM's
// mm_keys, vLLM's extra_keys) without an image token to normalize. nil when infos is absent or names
// no image, so the caller hashes tokens as usual.
func (a *RouterAPI) legacyMMHashes(tokens []uint32, infos []*blockMMInfo, lora, salt string) ([]uint64, error) {
	if infos == nil {
		return nil, nil
	}
	if tokens == nil {
		return nil, errorf(ErrBadRequest, "block_mm_infos needs tokens (the routing tokens, image positions keeping the image token id)")
	}
	bs := a.R.BlockSize()
	if blocks := (len(tokens) + bs - 1) / bs; len(infos) > blocks {
		return nil, errorf(ErrBadRequest, "block_mm_infos has %d entries for %d blocks of %d tokens", len(infos), blocks, bs)
	}
	blockMM := make([][]uint64, len(infos))
	named := false
	for i, info := range infos {
		if info == nil {
			continue
		}
		if len(info.MMObjects) > maxMMObjectsPerBlock {
			return nil, errorf(ErrBadRequest, "block_mm_infos[%d]: %d mm_objects exceed %d", i, len(info.MMObjects), maxMMObjectsPerBlock)
		}
		for _, o := range info.MMObjects {
			blockMM[i] = append(blockMM[i], o.MMHash)
			named = true
		}
	}
	if !named {
		return nil, nil
	}
	return scoring.LocalBlockHashes(nil, tokens, bs, scoring.DeriveSeed(lora, salt), blockMM), nil
}
