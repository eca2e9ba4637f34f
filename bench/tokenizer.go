package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvroute/kvroute/model"
)

// TokenizerConfig configures the tokenizer benchmark.
//
// One op encodes the whole text (the fixture corpus repeated to Bytes) with Encode. Cold: a freshly
// parsed tokenizer, so its word cache is empty and every pre-token goes through BPE; warm: the same
// tokenizer encoding the same text again, the steady state of a router seeing recurring prompts. Parsing
// tokenizer.json is timed separately (load).
type TokenizerConfig struct {
	// Fixtures lists tokenizer.json paths; empty means every tokenizer.json under testdata/models and
	// testdata/tokenizers.
	Fixtures []string
	// Corpus is a JSONL file of strings (one JSON string per line). Default
	// testdata/tokenizers/corpus.jsonl.
	Corpus string
	// Bytes is the text size. Default 1 MiB.
	Bytes int
	// ColdRuns and WarmRuns are the measured encodes per tokenizer. Defaults 2 and 5.
	ColdRuns, WarmRuns int
}

// DefaultTokenizerConfig returns the defaults, with paths relative to the repository root.
func DefaultTokenizerConfig() TokenizerConfig {
	return TokenizerConfig{Corpus: filepath.Join("testdata", "tokenizers", "corpus.jsonl"), Bytes: 1 << 20, ColdRuns: 2, WarmRuns: 5}
}

// FindTokenizers returns every tokenizer.json under root/testdata/{models,tokenizers}/*.
func FindTokenizers(root string) ([]string, error) {
	var out []string
	for _, dir := range []string{"models", "tokenizers"} {
		m, err := filepath.Glob(filepath.Join(root, "testdata", dir, "*", "tokenizer.json"))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no tokenizer.json under %s/testdata (run from the repository root)", root)
	}
	slices.Sort(out)
	return out, nil
}

// CorpusText reads a JSONL corpus of strings and joins them with newlines, repeated to n bytes.
func CorpusText(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var s string
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return "", fmt.Errorf("bench: corpus %s: %v", path, err)
		}
		lines = append(lines, s)
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if len(lines) == 0 {
		return "", fmt.Errorf("bench: corpus %s is empty", path)
	}
	var b strings.Builder
	for b.Len() < n {
		for _, s := range lines {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	s := b.String()[:n]
	for len(s) > 0 && !utf8.ValidString(s) { // do not cut a character in half
		s = s[:len(s)-1]
	}
	return s, nil
}

// TokenizerResult is one tokenizer's figures.
type TokenizerResult struct {
	Name        string  `json:"name"`
	Path        string  `json:"path"`
	Vocab       int     `json:"vocab"`
	Bytes       int     `json:"bytes"`
	Tokens      int     `json:"tokens"`
	LoadMillis  float64 `json:"load_ms"`
	ColdTokensS float64 `json:"cold_tokens_per_s"`
	WarmTokensS float64 `json:"warm_tokens_per_s"`
	WarmMBs     float64 `json:"warm_mb_per_s"`
}

// RunTokenizer measures one tokenizer file on text (median of the runs).
func RunTokenizer(path, text string, cfg TokenizerConfig, progress *Progress) (*TokenizerResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	res := &TokenizerResult{Name: filepath.Base(filepath.Dir(path)), Path: path, Bytes: len(text)}
	var loads, cold []float64
	for i := 0; i < max(1, cfg.ColdRuns); i++ {
		t0 := time.Now()
		tok, err := model.ParseTokenizer(data)
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		ids := tok.Encode(text)
		t2 := time.Now()
		res.Vocab, res.Tokens = tok.VocabSize(), len(ids)
		loads = append(loads, float64(t1.Sub(t0).Microseconds())/1e3)
		cold = append(cold, float64(len(ids))/t2.Sub(t1).Seconds())
		if progress != nil {
			progress.Add(1)
		}
	}
	tok, err := model.ParseTokenizer(data)
	if err != nil {
		return nil, err
	}
	dst := tok.AppendEncode(nil, text)
	var warm []float64
	for i := 0; i < max(1, cfg.WarmRuns); i++ {
		t0 := time.Now()
		dst = tok.AppendEncode(dst[:0], text)
		warm = append(warm, float64(len(dst))/time.Since(t0).Seconds())
		if progress != nil {
			progress.Add(1)
		}
	}
	res.LoadMillis = Summarize(loads).P50
	res.ColdTokensS = Summarize(cold).P50
	res.WarmTokensS = Summarize(warm).P50
	res.WarmMBs = res.WarmTokensS * float64(len(text)) / float64(max(1, res.Tokens)) / 1e6
	return res, nil
}

// FillTokenizerReport adds the tables and plots of a tokenizer bench to rep.
func FillTokenizerReport(rep *Report, cfg TokenizerConfig, results []*TokenizerResult) {
	rep.Data = map[string]any{"config": cfg, "results": results}
	tab := Table{Title: "Tokenizers (Encode, one goroutine)", Columns: []string{"tokenizer", "vocab", "text bytes", "tokens", "load ms", "cold tokens/s", "warm tokens/s", "warm MB/s"}}
	var labels []string
	var vals []float64
	for _, r := range results {
		tab.Rows = append(tab.Rows, []string{r.Name, FormatNum(float64(r.Vocab)), FormatNum(float64(r.Bytes)), FormatNum(float64(r.Tokens)), F(r.LoadMillis, 0),
			FormatNum(r.ColdTokensS), FormatNum(r.WarmTokensS), F(r.WarmMBs, 1)})
		labels = append(labels, r.Name+" cold", r.Name+" warm")
		vals = append(vals, r.ColdTokensS, r.WarmTokensS)
	}
	rep.Tables = append(rep.Tables, tab)
	rep.AddPlot("tokens_per_s.svg", "Tokens/s per tokenizer", (&BarPlot{Title: "Encode tokens/s (cold, warm)", YLabel: "tokens/s", Labels: labels, Values: vals}).SVG())
}
