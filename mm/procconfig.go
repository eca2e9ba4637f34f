package mm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ProcessorConfig is preprocessor_config.json as llm-multimodal 1.7.0 reads it for counting.
// A zero field means "absent": the counters apply their own defaults, and
// which absent fields matter differs per family, so nothing is defaulted here.
type ProcessorConfig struct {
	// PatchSize is patch_size (an int, or {height, width} of which height is used); filled from
	// media_proc_cfg.patch_size (Kimi) when absent at the top level.
	PatchSize int
	// MergeSize is merge_size; filled from media_proc_cfg.merge_kernel_size when absent.
	MergeSize int
	// MinPixels and MaxPixels are the top-level min_pixels / max_pixels only.
	MinPixels, MaxPixels int
	// TemporalPatchSize is temporal_patch_size.
	TemporalPatchSize int
	// HasSize is true when a size object is present; SizeHeight, SizeWidth, ShortestEdge and LongestEdge
	// are its fields (Qwen3 stores pixel counts in shortest_edge / longest_edge).
	HasSize                                          bool
	SizeHeight, SizeWidth, ShortestEdge, LongestEdge int
	// MaxImageTiles is max_image_tiles (Llama-4 configs name it max_patches, which 1.7.0 ignores).
	MaxImageTiles int
	// MaxPatches is max_patches: the Llama-4 image processor's tile budget, which vLLM reads.
	MaxPatches int
}

// TargetSize is size.height, else size.shortest_edge, else def (llm-multimodal get_target_size).
func (c ProcessorConfig) TargetSize(def int) int {
	if c.SizeHeight > 0 {
		return c.SizeHeight
	}
	if c.ShortestEdge > 0 {
		return c.ShortestEdge
	}
	return def
}

// ParseProcessorConfig decodes preprocessor_config.json.
func ParseProcessorConfig(data []byte) (ProcessorConfig, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return ProcessorConfig{}, fmt.Errorf("mm: preprocessor_config.json: %w", err)
	}
	var c ProcessorConfig
	c.PatchSize = jsonSide(raw["patch_size"])
	c.MergeSize = jsonInt(raw["merge_size"])
	c.MinPixels = jsonInt(raw["min_pixels"])
	c.MaxPixels = jsonInt(raw["max_pixels"])
	c.TemporalPatchSize = jsonInt(raw["temporal_patch_size"])
	c.MaxImageTiles = jsonInt(raw["max_image_tiles"])
	c.MaxPatches = jsonInt(raw["max_patches"])
	if size, ok := raw["size"].(map[string]any); ok {
		c.HasSize = true
		c.SizeHeight = jsonInt(size["height"])
		c.SizeWidth = jsonInt(size["width"])
		c.ShortestEdge = jsonInt(size["shortest_edge"])
		c.LongestEdge = jsonInt(size["longest_edge"])
	}
	if mp, ok := raw["media_proc_cfg"].(map[string]any); ok {
		if c.PatchSize == 0 {
			c.PatchSize = jsonSide(mp["patch_size"])
		}
		if c.MergeSize == 0 {
			c.MergeSize = jsonSide(mp["merge_kernel_size"])
		}
	}
	return c, nil
}

// LoadProcessorConfig reads dir/preprocessor_config.json.
func LoadProcessorConfig(dir string) (ProcessorConfig, error) {
	data, err := os.ReadFile(filepath.Join(dir, "preprocessor_config.json"))
	if err != nil {
		return ProcessorConfig{}, fmt.Errorf("mm: %w", err)
	}
	return ParseProcessorConfig(data)
}

func jsonInt(v any) int {
	if f, ok := v.(float64); ok && f > 0 && f < 1<<40 {
		return int(f)
	}
	return 0
}

// jsonSide reads an int, an {height, width} object (height wins) or a [h, w] array (first wins).
func jsonSide(v any) int {
	switch x := v.(type) {
	case map[string]any:
		return jsonInt(x["height"])
	case []any:
		if len(x) > 0 {
			return jsonInt(x[0])
		}
		return 0
	}
	return jsonInt(v)
}
