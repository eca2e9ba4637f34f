package model

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	json "github.com/goccy/go-json"
)

// ErrNotFound is the class of a model that cannot be found: no such directory, no HF cache snapshot, or a
// required file missing (the message names it).
var ErrNotFound = errors.New("model: not found")

// Model is what the router needs of an HF model directory: the tokenizer, the chat template and the few config
// values that multimodal routing reads. Immutable after Load and safe for concurrent use.
type Model struct {
	// Dir is the directory the files were read from.
	Dir string
	// Config holds config.json's ids and type.
	Config Config
	// TokenizerConfig holds tokenizer_config.json's special tokens and flags.
	TokenizerConfig TokenizerConfig
	// Preprocessor is preprocessor_config.json's image geometry; nil when the file is absent (text-only models).
	Preprocessor *Preprocessor
	// Generation is generation_config.json; nil when absent.
	Generation *GenerationConfig
	// Tokenizer is tokenizer.json.
	Tokenizer *Tokenizer
	// ChatTemplate is from chat_template.jinja, chat_template.json or tokenizer_config.json (that order);
	// nil when the model has none.
	ChatTemplate *ChatTemplate

	segments *SegmentCache
}

// Config is the part of config.json the router uses. Ids are -1 when the file does not give them.
type Config struct {
	ModelType     string
	Architectures []string
	// ImageTokenID is the chat placeholder id the frontend substitutes (image_token_id, else image_token_index).
	ImageTokenID       int64
	VideoTokenID       int64
	VisionStartTokenID int64
	VisionEndTokenID   int64
	// VisionTokenID is Qwen2-VL's vision_token_id (<|vision_pad|>), the placeholder of some processor specs.
	VisionTokenID int64
	// SpatialMergeSize and PatchSize come from vision_config (0 when absent).
	SpatialMergeSize  int
	PatchSize         int
	TemporalPatchSize int
	// Raw is the whole decoded file, for lookups this struct does not cover.
	Raw map[string]any
}

// Preprocessor is the image geometry of preprocessor_config.json: how an image becomes placeholder tokens.
type Preprocessor struct {
	PatchSize         int
	MergeSize         int
	TemporalPatchSize int
	// MinPixels and MaxPixels bound the resized image area (min_pixels/max_pixels, or size.shortest_edge /
	// size.longest_edge in newer files, which hold pixel counts despite their names).
	MinPixels int
	MaxPixels int
}

// GenerationConfig is the part of generation_config.json a router reports.
type GenerationConfig struct {
	EOSTokenIDs []uint32
	BOSTokenID  int64
}

// TokenizerConfig is the part of tokenizer_config.json that shapes prompts.
type TokenizerConfig struct {
	BOSToken, EOSToken, PadToken, UnkToken string
	AddBOSToken, AddEOSToken               bool
	ChatTemplate                           string
	TokenizerClass                         string
}

// TemplateVars are the special-token variables chat templates read (bos_token, eos_token, ...).
func (c TokenizerConfig) TemplateVars() map[string]any {
	return map[string]any{"bos_token": c.BOSToken, "eos_token": c.EOSToken, "pad_token": c.PadToken, "unk_token": c.UnkToken}
}

// Load reads an HF-layout model directory. tokenizer.json and config.json are required; the other files are
// optional.
func Load(dir string) (*Model, error) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotFound, dir)
	}
	m := &Model{Dir: dir, segments: NewSegmentCache(DefaultSegmentCacheBytes)}
	if err := m.loadConfig(); err != nil {
		return nil, err
	}
	if err := m.loadTokenizerConfig(); err != nil {
		return nil, err
	}
	tokPath := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(tokPath); err != nil {
		return nil, fmt.Errorf("%w: %s (only tokenizer.json tokenizers are supported)", ErrNotFound, tokPath)
	}
	if m.Tokenizer, err = LoadTokenizer(tokPath); err != nil {
		return nil, err
	}
	if err := m.loadPreprocessor(); err != nil {
		return nil, err
	}
	if err := m.loadGeneration(); err != nil {
		return nil, err
	}
	src, err := m.templateSource()
	if err != nil {
		return nil, err
	}
	if src != "" {
		if m.ChatTemplate, err = NewChatTemplate(src, m.TokenizerConfig.TemplateVars()); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func readJSON(path string, required bool, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) && !required {
			return false, nil
		}
		return false, fmt.Errorf("%w: %s: %v", ErrNotFound, path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("model: %s: %w", path, err)
	}
	return true, nil
}

func (m *Model) loadConfig() error {
	var raw map[string]any
	if _, err := readJSON(filepath.Join(m.Dir, "config.json"), true, &raw); err != nil {
		return err
	}
	c := Config{Raw: raw, ImageTokenID: -1, VideoTokenID: -1, VisionStartTokenID: -1, VisionEndTokenID: -1, VisionTokenID: -1}
	c.ModelType, _ = raw["model_type"].(string)
	if a, ok := raw["architectures"].([]any); ok {
		for _, x := range a {
			if s, ok := x.(string); ok {
				c.Architectures = append(c.Architectures, s)
			}
		}
	}
	num := func(obj map[string]any, key string) (int64, bool) {
		f, ok := obj[key].(float64)
		return int64(f), ok
	}
	if v, ok := num(raw, "image_token_id"); ok {
		c.ImageTokenID = v
	} else if v, ok := num(raw, "image_token_index"); ok {
		c.ImageTokenID = v
	}
	if v, ok := num(raw, "video_token_id"); ok {
		c.VideoTokenID = v
	}
	if v, ok := num(raw, "vision_start_token_id"); ok {
		c.VisionStartTokenID = v
	}
	if v, ok := num(raw, "vision_end_token_id"); ok {
		c.VisionEndTokenID = v
	}
	if v, ok := num(raw, "vision_token_id"); ok {
		c.VisionTokenID = v
	}
	if vc, ok := raw["vision_config"].(map[string]any); ok {
		if v, ok := num(vc, "spatial_merge_size"); ok {
			c.SpatialMergeSize = int(v)
		}
		if v, ok := num(vc, "patch_size"); ok {
			c.PatchSize = int(v)
		}
		if v, ok := num(vc, "temporal_patch_size"); ok {
			c.TemporalPatchSize = int(v)
		}
	}
	m.Config = c
	return nil
}

// tokenString reads a special token that may be a string or an AddedToken object {"content": ...}.
func tokenString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		s, _ := x["content"].(string)
		return s
	}
	return ""
}

func (m *Model) loadTokenizerConfig() error {
	c, err := ReadTokenizerConfig(filepath.Join(m.Dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	m.TokenizerConfig = c
	return nil
}

// ReadTokenizerConfig reads a tokenizer_config.json. A missing file is an error wrapping os.ErrNotExist.
func ReadTokenizerConfig(path string) (TokenizerConfig, error) {
	var raw map[string]any
	data, err := os.ReadFile(path)
	if err != nil {
		return TokenizerConfig{}, fmt.Errorf("model: %w", err)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return TokenizerConfig{}, fmt.Errorf("model: %s: %w", path, err)
	}
	c := TokenizerConfig{
		BOSToken: tokenString(raw["bos_token"]),
		EOSToken: tokenString(raw["eos_token"]),
		PadToken: tokenString(raw["pad_token"]),
		UnkToken: tokenString(raw["unk_token"]),
	}
	c.AddBOSToken, _ = raw["add_bos_token"].(bool)
	c.AddEOSToken, _ = raw["add_eos_token"].(bool)
	c.TokenizerClass, _ = raw["tokenizer_class"].(string)
	switch t := raw["chat_template"].(type) {
	case string:
		c.ChatTemplate = t
	case []any: // named templates: [{"name": "default", "template": ...}, ...]
		for _, e := range t {
			if em, ok := e.(map[string]any); ok && em["name"] == "default" {
				c.ChatTemplate, _ = em["template"].(string)
			}
		}
	}
	return c, nil
}

func (m *Model) loadPreprocessor() error {
	var raw map[string]any
	found, err := readJSON(filepath.Join(m.Dir, "preprocessor_config.json"), false, &raw)
	if err != nil || !found {
		return err
	}
	geti := func(obj map[string]any, key string) int {
		f, _ := obj[key].(float64)
		return int(f)
	}
	p := &Preprocessor{
		PatchSize:         geti(raw, "patch_size"),
		MergeSize:         geti(raw, "merge_size"),
		TemporalPatchSize: geti(raw, "temporal_patch_size"),
		MinPixels:         geti(raw, "min_pixels"),
		MaxPixels:         geti(raw, "max_pixels"),
	}
	if size, ok := raw["size"].(map[string]any); ok {
		if p.MinPixels == 0 {
			p.MinPixels = geti(size, "shortest_edge")
		}
		if p.MaxPixels == 0 {
			p.MaxPixels = geti(size, "longest_edge")
		}
	}
	if p.MergeSize == 0 {
		p.MergeSize = m.Config.SpatialMergeSize
	}
	m.Preprocessor = p
	return nil
}

func (m *Model) loadGeneration() error {
	var raw map[string]any
	found, err := readJSON(filepath.Join(m.Dir, "generation_config.json"), false, &raw)
	if err != nil || !found {
		return err
	}
	g := &GenerationConfig{BOSTokenID: -1}
	switch e := raw["eos_token_id"].(type) {
	case float64:
		g.EOSTokenIDs = []uint32{uint32(e)}
	case []any:
		for _, x := range e {
			if f, ok := x.(float64); ok {
				g.EOSTokenIDs = append(g.EOSTokenIDs, uint32(f))
			}
		}
	}
	if f, ok := raw["bos_token_id"].(float64); ok {
		g.BOSTokenID = int64(f)
	}
	m.Generation = g
	return nil
}

// templateSource picks the chat template the way vLLM does for a processor-backed model: a standalone template
// file first, then the tokenizer's.
func (m *Model) templateSource() (string, error) {
	if data, err := os.ReadFile(filepath.Join(m.Dir, "chat_template.jinja")); err == nil {
		return string(data), nil
	}
	var ct struct {
		ChatTemplate string `json:"chat_template"`
	}
	if found, err := readJSON(filepath.Join(m.Dir, "chat_template.json"), false, &ct); err != nil {
		return "", err
	} else if found && ct.ChatTemplate != "" {
		return ct.ChatTemplate, nil
	}
	return m.TokenizerConfig.ChatTemplate, nil
}

// Resolve turns a model name or path into a directory: an existing directory is returned as is; a name such as
// "Qwen/Qwen3-VL-2B-Instruct" is looked up in the HF hub cache ($HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub) as models--Qwen--Qwen3-VL-2B-Instruct/snapshots/<rev>, with <rev> from refs/main or,
// failing that, the most recently modified snapshot. Nothing is downloaded.
func Resolve(nameOrPath string) (string, error) {
	if st, err := os.Stat(nameOrPath); err == nil && st.IsDir() {
		return nameOrPath, nil
	}
	cache := os.Getenv("HF_HUB_CACHE")
	if cache == "" {
		if home := os.Getenv("HF_HOME"); home != "" {
			cache = filepath.Join(home, "hub")
		} else if uh, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(uh, ".cache", "huggingface", "hub")
		}
	}
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(nameOrPath, "/", "--"))
	snaps := filepath.Join(repo, "snapshots")
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		dir := filepath.Join(snaps, strings.TrimSpace(string(ref)))
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, nil
		}
	}
	entries, err := os.ReadDir(snaps)
	if err != nil || len(entries) == 0 {
		return "", fmt.Errorf("%w: %q is neither a directory nor in the HF cache (%s)", ErrNotFound, nameOrPath, snaps)
	}
	type snap struct {
		dir string
		mod int64
	}
	var all []snap
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() {
			all = append(all, snap{filepath.Join(snaps, e.Name()), info.ModTime().UnixNano()})
		}
	}
	if len(all) == 0 {
		return "", fmt.Errorf("%w: no snapshot in %s", ErrNotFound, snaps)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod > all[j].mod })
	return all[0].dir, nil
}

// LoadNamed is Resolve then Load.
func LoadNamed(nameOrPath string) (*Model, error) {
	dir, err := Resolve(nameOrPath)
	if err != nil {
		return nil, err
	}
	return Load(dir)
}
