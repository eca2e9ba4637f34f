package model

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	json "github.com/goccy/go-json"
)

// Paths of the three tokenizers checked against the reference implementation (testdata/tokenizers/README.md).
var testTokenizers = map[string]string{
	"qwen3":  "../testdata/models/Qwen3-VL-2B-Instruct/tokenizer.json",
	"llama3": "../testdata/tokenizers/llama3/tokenizer.json",
	"llama2": "../testdata/tokenizers/llama2/tokenizer.json",
}

var (
	loadedMu   sync.Mutex
	loadedToks = map[string]*Tokenizer{}
)

// testTokenizer loads a tokenizer once per test binary (the files are megabytes of JSON).
func testTokenizer(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loadedToks[name]; ok {
		return t
	}
	t, err := LoadTokenizer(testTokenizers[name])
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loadedToks[name] = t
	return t
}

func readCorpus(tb testing.TB) []string {
	tb.Helper()
	data, err := os.ReadFile("../testdata/tokenizers/corpus.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var s string
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			tb.Fatalf("corpus line %q: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

func readGzipLines(tb testing.TB, path string) []string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func parseIDs(line string) []uint32 {
	out := []uint32{}
	for _, f := range strings.Fields(line) {
		v, _ := strconv.ParseUint(f, 10, 32)
		out = append(out, uint32(v))
	}
	return out
}

func idsString(ids []uint32) string {
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	return sb.String()
}

// TestGoldenOracle asserts id equality with @huggingface/tokenizers on the whole corpus for each tokenizer, and
// that decode gives back the oracle's decode (the input itself, except where normalization changed it).
func TestGoldenOracle(t *testing.T) {
	corpus := readCorpus(t)
	if len(corpus) < 3000 {
		t.Fatalf("corpus has %d strings, want >= 3000", len(corpus))
	}
	for _, name := range []string{"qwen3", "llama3", "llama2"} {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			golden := readGzipLines(t, filepath.Join("../testdata/tokenizers/golden", name+".ids.gz"))
			if len(golden) != len(corpus) {
				t.Fatalf("golden has %d lines, corpus %d", len(golden), len(corpus))
			}
			decodes := map[int]string{}
			for _, line := range readGzipLines(t, filepath.Join("../testdata/tokenizers/golden", name+".decode.gz")) {
				i, js, _ := strings.Cut(line, "\t")
				n, _ := strconv.Atoi(i)
				var s string
				if err := json.Unmarshal([]byte(js), &s); err != nil {
					t.Fatal(err)
				}
				decodes[n] = s
			}
			bad := 0
			for i, s := range corpus {
				got := idsString(tok.Encode(s))
				if got != golden[i] {
					bad++
					if bad <= 5 {
						t.Errorf("line %d %q:\n got  %s\n want %s", i+1, s, got, golden[i])
					}
					continue
				}
				want, ok := decodes[i]
				if !ok {
					want = s
				}
				if d := tok.Decode(parseIDs(golden[i]), DecodeOptions{}); d != want {
					bad++
					if bad <= 5 {
						t.Errorf("line %d %q: decode %q, want %q", i+1, s, d, want)
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%s: %d of %d strings differ from the oracle", name, bad, len(corpus))
			}
		})
	}
}

// TestPostProcessor checks the ids added with add_special_tokens=true (Llama-2's <s>).
func TestPostProcessor(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3", "llama2"} {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			data, err := os.ReadFile(filepath.Join("../testdata/tokenizers/golden", name+".bos.txt"))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				js, want, _ := strings.Cut(line, "\t")
				var s string
				if err := json.Unmarshal([]byte(js), &s); err != nil {
					t.Fatal(err)
				}
				if got := idsString(tok.EncodeSpecial(s)); got != want {
					t.Errorf("%q: got %s, want %s", s, got, want)
				}
			}
		})
	}
}

// TestRoundTrip checks decode(encode(s)) == s for byte-level tokenizers on text without added tokens, including
// invalid UTF-8 (every byte is a token).
func TestRoundTrip(t *testing.T) {
	tok := testTokenizer(t, "llama3") // no normalizer, so every input must come back
	tests := []string{"", "hello", "a\xffb", "\xe4\xbd", "  \n\t\r\n x", strings.Repeat("好", 500), "\u0085\u00a0\u3000\u2028\u200b"}
	for _, s := range tests {
		if got := tok.Decode(tok.Encode(s), DecodeOptions{}); got != s {
			t.Errorf("round trip %q: got %q", s, got)
		}
	}
	if !utf8.ValidString(tok.Decode(tok.Encode("ok"), DecodeOptions{})) {
		t.Error("invalid output")
	}
}

func ExampleTokenizer_Encode() {
	tok, err := LoadTokenizer("../testdata/models/Qwen3-VL-2B-Instruct/tokenizer.json")
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("<|im_start|>user\nHello world<|im_end|>")
	fmt.Println(ids, tok.Decode(ids, DecodeOptions{SkipSpecial: true}))
	// Output: [151644 872 198 9707 1879 151645] user
	// Hello world
}

// TestMetaspace rebuilds the Llama-2 tokenizer with a Metaspace pre-tokenizer (prepend "always", no split) in place
// of its Prepend+Replace normalizer. The two agree on text without added tokens that does not start with a space,
// so the oracle's ids for those corpus lines must come out again.
func TestMetaspace(t *testing.T) {
	data, err := os.ReadFile(testTokenizers["llama2"])
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	raw["normalizer"] = json.RawMessage(`null`)
	raw["pre_tokenizer"] = json.RawMessage(`{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":false}`)
	raw["decoder"] = json.RawMessage(`{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":false}]}`)
	data, err = json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseTokenizer(data)
	if err != nil {
		t.Fatal(err)
	}
	corpus := readCorpus(t)
	golden := readGzipLines(t, "../testdata/tokenizers/golden/llama2.ids.gz")
	checked := 0
	for i, s := range corpus {
		if s == "" || s[0] == ' ' || strings.Contains(s, "\u2581") || strings.Contains(s, "<s>") || strings.Contains(s, "</s>") || strings.Contains(s, "<unk>") {
			continue
		}
		checked++
		if got := idsString(tok.Encode(s)); got != golden[i] {
			t.Fatalf("line %d %q:\n got  %s\n want %s", i+1, s, got, golden[i])
		}
		if utf8.ValidString(s) {
			if d := tok.Decode(tok.Encode(s), DecodeOptions{}); d != s {
				t.Fatalf("decode %q: %q", s, d)
			}
		}
	}
	if checked < 2000 {
		t.Fatalf("only %d lines checked", checked)
	}
}
