package mocker

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// Embeddings, score, rerank and responses answer in vLLM's shapes; embeddings are deterministic unit
// vectors (base64 is the same float32 vector), a text scores highest against itself.
func TestPoolingAndResponsesShapes(t *testing.T) {
	w := startTestWorker(t, nil)
	var emb struct {
		Object string
		Data   []struct {
			Index     int
			Object    string
			Embedding json.RawMessage
		}
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	st, b := postJSON(t, w.URL()+"/v1/embeddings", map[string]any{"input": []string{"hello world", "hello world"}})
	must(t, json.Unmarshal(b, &emb))
	if st != 200 || emb.Object != "list" || len(emb.Data) != 2 || emb.Data[1].Index != 1 || emb.Data[0].Object != "embedding" ||
		string(emb.Data[0].Embedding) != string(emb.Data[1].Embedding) || emb.Usage.PromptTokens == 0 {
		t.Fatalf("embeddings: %d %s", st, b)
	}
	var vec []float32
	must(t, json.Unmarshal(emb.Data[0].Embedding, &vec))
	st, b = postJSON(t, w.URL()+"/v1/embeddings", map[string]any{"input": "hello world", "encoding_format": "base64", "dimensions": 8})
	must(t, json.Unmarshal(b, &emb))
	var s string
	must(t, json.Unmarshal(emb.Data[0].Embedding, &s))
	raw, err := base64.StdEncoding.DecodeString(s)
	if st != 200 || err != nil || len(raw) != 32 || len(vec) != embedDim {
		t.Errorf("base64 embedding: %d %s", st, b)
	}

	var score struct {
		Object string
		Data   []struct {
			Object string
			Score  float64
		}
	}
	st, b = postJSON(t, w.URL()+"/v1/score", map[string]any{"text_1": "the cat sat", "text_2": []string{"stocks fell", "the cat sat"}})
	must(t, json.Unmarshal(b, &score))
	if st != 200 || len(score.Data) != 2 || score.Data[0].Object != "score" || score.Data[1].Score <= score.Data[0].Score {
		t.Errorf("score: %d %s", st, b)
	}
	var rr struct {
		Results []struct {
			Index          int
			RelevanceScore float64 `json:"relevance_score"`
			Document       struct{ Text string }
		}
	}
	st, b = postJSON(t, w.URL()+"/v1/rerank", map[string]any{"query": "the cat sat", "documents": []string{"stocks fell", "the cat sat", "rain"}, "top_n": 2})
	must(t, json.Unmarshal(b, &rr))
	if st != 200 || len(rr.Results) != 2 || rr.Results[0].Index != 1 || rr.Results[0].Document.Text != "the cat sat" {
		t.Errorf("rerank: %d %s", st, b)
	}

	var resp struct {
		ID, Object, Status string
		Output             []struct {
			Type, Role string
			Content    []struct{ Type, Text string }
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	st, b = postJSON(t, w.URL()+"/v1/responses", map[string]any{"input": "Say hi", "instructions": "Be brief.", "max_output_tokens": 4})
	must(t, json.Unmarshal(b, &resp))
	if st != 200 || resp.Object != "response" || resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") ||
		len(resp.Output) != 1 || resp.Output[0].Content[0].Type != "output_text" || resp.Usage.OutputTokens != 4 || resp.Usage.InputTokens == 0 {
		t.Errorf("responses: %d %s", st, b)
	}
	chunks, _ := sseChunks(t, w.URL()+"/v1/responses", map[string]any{"input": "Say hi", "max_output_tokens": 3, "stream": true})
	var types []string
	for _, c := range chunks {
		types = append(types, c["type"].(string))
	}
	if len(types) < 5 || types[0] != "response.created" || types[len(types)-1] != "response.completed" ||
		!strings.Contains(strings.Join(types, ","), "response.output_text.delta") {
		t.Errorf("responses stream events: %v", types)
	}
	if st, b := postJSON(t, w.URL()+"/v1/responses", map[string]any{"input": "x", "previous_response_id": "resp_1"}); st != 400 {
		t.Errorf("previous_response_id: %d %s", st, b)
	}
}
