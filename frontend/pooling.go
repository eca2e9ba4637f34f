package frontend

import (
	"bytes"
	"slices"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/frontend/openai"
	"github.com/kvroute/kvroute/model"
)

// maxPoolingInputs bounds the texts of one embeddings / score / rerank request (vLLM batches them into
// one engine call): far above real batches, and it caps tokenization work.
const maxPoolingInputs = 4096

// poolingInput is what routing needs from a pooling request: its texts (or token-id inputs), in order.
type poolingInput struct {
	model  string
	texts  []string
	tokens [][]uint32
}

// stringOrList is a JSON string or a list of strings.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

// decodePooling reads the model and the inputs of an embeddings, score or rerank body, as vLLM names
// them: embeddings input (a string, strings, token ids or lists of token ids); score text_1 / text_2
// (or queries / documents, data_1 / data_2); rerank query and documents (strings or {"text"} objects).
func decodePooling(ep endpoint, body []byte, served []string) (*poolingInput, error) {
	var r struct {
		Model     string          `json:"model"`
		Input     json.RawMessage `json:"input"`
		Text1     stringOrList    `json:"text_1"`
		Text2     stringOrList    `json:"text_2"`
		Queries   stringOrList    `json:"queries"`
		Documents json.RawMessage `json:"documents"`
		Data1     stringOrList    `json:"data_1"`
		Data2     stringOrList    `json:"data_2"`
		Query     *string         `json:"query"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, errorf(ErrBadRequest, "invalid JSON body: %v", err)
	}
	if r.Model == "" {
		return nil, &openai.Error{Class: ErrBadRequest, Param: "model", Msg: "is required"}
	}
	if len(served) > 0 && !slices.Contains(served, r.Model) {
		return nil, &openai.Error{Class: ErrNotFound, Param: "model", Msg: "the model `" + r.Model + "` does not exist"}
	}
	in := &poolingInput{model: r.Model}
	switch ep {
	case epEmbeddings:
		if err := in.readInput(r.Input); err != nil {
			return nil, err
		}
	case epScore:
		a, b := r.Text1, r.Text2
		if len(a) == 0 {
			a, b = r.Queries, r.Data2
			if len(a) == 0 {
				a = r.Data1
			}
		}
		if len(b) == 0 {
			docs, err := documents(r.Documents)
			if err != nil {
				return nil, err
			}
			b = docs
		}
		if len(a) == 0 || len(b) == 0 {
			return nil, &openai.Error{Class: ErrBadRequest, Param: "text_1", Msg: "score needs text_1 and text_2"}
		}
		in.texts = append(append(in.texts, a...), b...)
	case epRerank:
		docs, err := documents(r.Documents)
		if err != nil {
			return nil, err
		}
		if r.Query == nil || len(docs) == 0 {
			return nil, &openai.Error{Class: ErrBadRequest, Param: "documents", Msg: "rerank needs query and documents"}
		}
		in.texts = append([]string{*r.Query}, docs...)
	}
	if len(in.texts)+len(in.tokens) > maxPoolingInputs {
		return nil, errorf(ErrTooLarge, "%d inputs exceed the limit of %d", len(in.texts)+len(in.tokens), maxPoolingInputs)
	}
	return in, nil
}

// readInput reads an embeddings input: a string, a list of strings, a list of token ids or a list of
// such lists.
func (in *poolingInput) readInput(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	bad := &openai.Error{Class: ErrBadRequest, Param: "input", Msg: "want a string, a list of strings or a list of token-id lists"}
	if len(raw) == 0 || string(raw) == "null" {
		return &openai.Error{Class: ErrBadRequest, Param: "input", Msg: "is required"}
	}
	var texts stringOrList
	if json.Unmarshal(raw, &texts) == nil {
		if len(texts) == 0 {
			return bad
		}
		in.texts = texts
		return nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		in.tokens = [][]uint32{ids}
		return nil
	}
	var lists [][]uint32
	if json.Unmarshal(raw, &lists) != nil || len(lists) == 0 {
		return bad
	}
	in.tokens = lists
	return nil
}

// documents reads rerank / score documents: strings or {"text": ...} objects.
func documents(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var texts stringOrList
	if json.Unmarshal(raw, &texts) == nil {
		return texts, nil
	}
	var objs []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &objs); err != nil {
		return nil, &openai.Error{Class: ErrBadRequest, Param: "documents", Msg: "want strings or {\"text\": ...} objects"}
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Text
	}
	return out, nil
}

// poolingTokens are a pooling request's routing tokens: every input's tokens in order. The engine runs
// the inputs as one batch; their sum is the prefill the worker is charged, and the first input's
// prefix is what its cache may hold.
func (a *OpenAIAPI) poolingTokens(in *poolingInput) ([]uint32, error) {
	var toks []uint32
	for _, ids := range in.tokens {
		toks = append(toks, ids...)
	}
	if len(in.texts) > 0 {
		if a.Model == nil {
			return nil, errorf(ErrUnprocessable, "text inputs need a tokenizer; send token ids")
		}
		for _, s := range in.texts {
			toks = append(toks, a.Model.Tokenizer.Encode(s)...)
		}
	}
	if len(toks) > a.Cfg.Limits.MaxPromptTokens && a.Cfg.Limits.MaxPromptTokens > 0 {
		return nil, errorf(ErrTooLarge, "%d input tokens exceed the limit of %d", len(toks), a.Cfg.Limits.MaxPromptTokens)
	}
	return toks, nil
}

// detokenizeEndpoint is vLLM's /detokenize: token ids back to text with the model's tokenizer.
func (a *OpenAIAPI) detokenizeEndpoint(ctx *fasthttp.RequestCtx) {
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := decodeBody(ctx, &req); err != nil {
		writeError(ctx, err)
		return
	}
	if !a.tokenizerFor(ctx, req.Model) {
		return
	}
	if req.Tokens == nil {
		writeError(ctx, &openai.Error{Class: ErrBadRequest, Param: "tokens", Msg: "is required"})
		return
	}
	writeJSON(ctx, map[string]string{"prompt": strings.ToValidUTF8(a.Model.Tokenizer.Decode(req.Tokens, model.DecodeOptions{}), "\uFFFD")})
}
