package model

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	json "github.com/goccy/go-json"
)

type chatCase struct {
	Name                string            `json:"name"`
	Messages            json.RawMessage   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	AddGenerationPrompt bool              `json:"add_generation_prompt"`
	Kwargs              map[string]any    `json:"kwargs"`
	Templates           []string          `json:"templates"`
}

func readChatCases(tb testing.TB) []chatCase {
	tb.Helper()
	data, err := os.ReadFile("testdata/chat/cases.json")
	if err != nil {
		tb.Fatal(err)
	}
	var cases []chatCase
	if err := json.Unmarshal(data, &cases); err != nil {
		tb.Fatal(err)
	}
	return cases
}

var (
	fixtureOnce  sync.Once
	fixtureModel *Model
	fixtureErr   error
)

const fixtureDir = "../testdata/models/Qwen3-VL-2B-Instruct"

func fixture(tb testing.TB) *Model {
	tb.Helper()
	fixtureOnce.Do(func() { fixtureModel, fixtureErr = Load(fixtureDir) })
	if fixtureErr != nil {
		tb.Fatal(fixtureErr)
	}
	return fixtureModel
}

func (c chatCase) request(tb testing.TB) ([]Message, ChatOptions) {
	tb.Helper()
	msgs, err := ParseMessages(c.Messages)
	if err != nil {
		tb.Fatal(err)
	}
	return msgs, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, Tools: c.Tools, Kwargs: c.Kwargs}
}

// TestChatTemplateGolden compares gonja's rendering with Jinja2's (written by scripts/gen-template-golden.py with
// transformers' settings) for the fixture template and two tokenizer_config.json templates (Qwen3 text-only,
// Llama-3).
func TestChatTemplateGolden(t *testing.T) {
	m := fixture(t)
	llama, err := ReadTokenizerConfig("../testdata/tokenizers/llama3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]*ChatTemplate{"fixture": m.ChatTemplate}
	for name, tc := range map[string]TokenizerConfig{"qwen3-text": m.TokenizerConfig, "llama3": llama} {
		if templates[name], err = NewChatTemplate(tc.ChatTemplate, tc.TemplateVars()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, c := range readChatCases(t) {
		names := c.Templates
		if len(names) == 0 {
			names = []string{"fixture"}
		}
		for _, name := range names {
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				want, err := os.ReadFile(filepath.Join("testdata/chat", name, c.Name+".txt"))
				if err != nil {
					t.Fatal(err)
				}
				msgs, opts := c.request(t)
				got, err := templates[name].Render(msgs, opts)
				if err != nil {
					t.Fatal(err)
				}
				if got != string(want) {
					t.Errorf("render differs from Jinja2\n got: %q\nwant: %q", got, want)
				}
			})
		}
	}
}

// TestEncodeChatImages checks that image parts become the Qwen placeholder ids.
func TestEncodeChatImages(t *testing.T) {
	m := fixture(t)
	if m.Config.ImageTokenID != 151655 || m.Config.VisionStartTokenID != 151652 || m.Config.VisionEndTokenID != 151653 {
		t.Fatalf("config ids: %+v", m.Config)
	}
	msgs := []Message{{Role: "user", Content: PartsContent(
		ContentPart{Type: "image_url", ImageURL: &MediaURL{URL: "https://example.com/x.png"}},
		ContentPart{Type: "text", Text: "Describe."},
	)}}
	ids, err := m.EncodeChat(msgs, ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{151644, 872, 198, 151652, 151655, 151653}
	if !slices.Equal(ids[:len(want)], want) {
		t.Fatalf("prefix %v, want %v", ids[:len(want)], want)
	}
	if n := len(ids); ids[n-3] != 151644 || ids[n-2] != 77091 || ids[n-1] != 198 {
		t.Fatalf("generation prompt missing: %v", ids[n-3:])
	}
}

func TestLoadFixture(t *testing.T) {
	m := fixture(t)
	if m.Config.ModelType != "qwen3_vl" {
		t.Errorf("model_type %q", m.Config.ModelType)
	}
	p := m.Preprocessor
	if p == nil || p.PatchSize != 16 || p.MergeSize != 2 || p.TemporalPatchSize != 2 || p.MinPixels != 65536 || p.MaxPixels != 16777216 {
		t.Errorf("preprocessor %+v", p)
	}
	if m.TokenizerConfig.EOSToken != "<|im_end|>" || m.TokenizerConfig.AddBOSToken {
		t.Errorf("tokenizer config %+v", m.TokenizerConfig)
	}
	if m.Generation == nil || !slices.Equal(m.Generation.EOSTokenIDs, []uint32{151645, 151643}) {
		t.Errorf("generation %+v", m.Generation)
	}
	for tok, want := range map[string]uint32{"<|image_pad|>": 151655, "<|vision_start|>": 151652, "<|vision_end|>": 151653} {
		if id, ok := m.Tokenizer.TokenID(tok); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v", tok, id, ok)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing")); !errorsIs(err, ErrNotFound) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := Load(dir); !errorsIs(err, ErrNotFound) || !contains(err.Error(), "config.json") {
		t.Errorf("no config.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errorsIs(err, ErrNotFound) || !contains(err.Error(), "tokenizer.json") {
		t.Errorf("no tokenizer.json: %v", err)
	}
}

func TestResolveHFCache(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", home)
	snap := filepath.Join(home, "hub", "models--Qwen--Qwen3-VL-2B-Instruct", "snapshots", "abc123")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, "hub", "models--Qwen--Qwen3-VL-2B-Instruct", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "hub", "models--Qwen--Qwen3-VL-2B-Instruct", "refs", "main"), []byte("abc123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Resolve("Qwen/Qwen3-VL-2B-Instruct")
	if err != nil || got != snap {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, snap)
	}
	if got, err := Resolve(fixtureDir); err != nil || got != fixtureDir {
		t.Errorf("Resolve(dir) = %q, %v", got, err)
	}
	if _, err := Resolve("Nobody/Nothing"); !errorsIs(err, ErrNotFound) {
		t.Errorf("unknown name: %v", err)
	}
}

func errorsIs(err, target error) bool { return err != nil && errors.Is(err, target) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestChatTemplateRandomJinja2: 900 random conversations (300 per template) rendered by Jinja2
// (scripts/gen-template-golden.py) must render identically through gonja, and through the native renderer for the
// fixture template.
func TestChatTemplateRandomJinja2(t *testing.T) {
	m := fixture(t)
	llama, err := ReadTokenizerConfig("../testdata/tokenizers/llama3/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	gonjaFixture := *m.ChatTemplate
	gonjaFixture.native = nil
	templates := map[string][]*ChatTemplate{"fixture": {m.ChatTemplate, &gonjaFixture}}
	for name, tc := range map[string]TokenizerConfig{"qwen3-text": m.TokenizerConfig, "llama3": llama} {
		ct, err := NewChatTemplate(tc.ChatTemplate, tc.TemplateVars())
		if err != nil {
			t.Fatal(err)
		}
		templates[name] = []*ChatTemplate{ct}
	}
	lines := readGzipLines(t, "testdata/chat/random.jsonl.gz")
	if len(lines) < 900 {
		t.Fatalf("%d random cases", len(lines))
	}
	bad := 0
	for i, line := range lines {
		var c struct {
			Template string `json:"template"`
			Request  struct {
				Messages            json.RawMessage   `json:"messages"`
				Tools               []json.RawMessage `json:"tools"`
				AddGenerationPrompt bool              `json:"add_generation_prompt"`
				Kwargs              map[string]any    `json:"kwargs"`
			} `json:"request"`
			Output string `json:"output"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		msgs, err := ParseMessages(c.Request.Messages)
		if err != nil {
			t.Fatal(err)
		}
		opts := ChatOptions{AddGenerationPrompt: c.Request.AddGenerationPrompt, Tools: c.Request.Tools, Kwargs: c.Request.Kwargs}
		for k, ct := range templates[c.Template] {
			got, err := ct.Render(msgs, opts)
			if err != nil || got != c.Output {
				bad++
				if bad <= 3 {
					t.Errorf("case %d (%s, renderer %d): err %v\nmessages %s\n got: %q\nwant: %q", i, c.Template, k, err, c.Request.Messages, got, c.Output)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d renderings differ from Jinja2", bad)
	}
}
