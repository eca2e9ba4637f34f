package frontend

import (
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/kvroute/kvroute/frontend/openai"
)

// Models serves several models behind one endpoint. Each model is an OpenAIAPI of its own — tokenizer,
// block size, router core (index, scheduler) and workers — and a request goes to the one its body's
// "model" names: a prompt of one model can never be routed to, or predicted cached on, a worker of
// another. Models answers /v1/models and /v1/models/{id} itself, for all of them.
//
// The models are fixed at construction (cmd/ builds them from --model before serving), so reads need
// no lock.
type Models struct {
	apis    []*OpenAIAPI // in --model order; apis[0] takes bodies that name no model (/tokenize)
	byName  map[string]*OpenAIAPI
	names   []string
	created int64
}

// NewModels serves apis; their names must be distinct. At least one.
func NewModels(apis ...*OpenAIAPI) *Models {
	m := &Models{apis: apis, byName: make(map[string]*OpenAIAPI, len(apis)), created: time.Now().Unix()}
	for _, a := range apis {
		m.byName[a.ModelName] = a
		m.names = append(m.names, a.ModelName)
	}
	return m
}

// Get returns the API of the named model, or nil.
func (m *Models) Get(name string) *OpenAIAPI { return m.byName[name] }

// APIs returns the models' APIs in order.
func (m *Models) APIs() []*OpenAIAPI { return m.apis }

// Handle serves the model listing itself and hands every other OpenAI path to the API of the model the
// body names; an unknown model is a 404 in OpenAI's shape before anything is parsed further.
func (m *Models) Handle(ctx *fasthttp.RequestCtx) bool {
	path := string(ctx.Path())
	switch {
	case path == "/v1/models":
		if !ctx.IsGet() && !ctx.IsHead() {
			methodNotAllowed(ctx, "GET, HEAD", errorf(ErrMethod, "%s /v1/models: use GET", ctx.Method()))
			return true
		}
		cards := make([]modelCard, len(m.apis))
		for i, a := range m.apis {
			cards[i] = m.card(a)
		}
		writeJSON(ctx, modelList{Object: "list", Data: cards})
		return true
	case strings.HasPrefix(path, "/v1/models/"):
		if !ctx.IsGet() && !ctx.IsHead() {
			methodNotAllowed(ctx, "GET, HEAD", errorf(ErrMethod, "%s %s: use GET", ctx.Method(), path))
			return true
		}
		// Model ids may contain slashes (org/name): the rest of the path is the id.
		id := strings.TrimPrefix(path, "/v1/models/")
		a := m.byName[id]
		if a == nil {
			writeError(ctx, m.unknown(id))
			return true
		}
		writeJSON(ctx, m.card(a))
		return true
	}
	if !servesPath(path) {
		return false
	}
	if len(m.apis) == 1 {
		return m.apis[0].Handle(ctx)
	}
	name, ok := bodyModel(ctx)
	if !ok {
		// No model named: the first model's API answers (the generate endpoints refuse it, "model is
		// required"; /tokenize and /detokenize use the default model as vLLM does).
		return m.apis[0].Handle(ctx)
	}
	a := m.byName[name]
	if a == nil {
		writeError(ctx, m.unknown(name))
		return true
	}
	return a.Handle(ctx)
}

// unknown is the 404 for a model no API serves.
func (m *Models) unknown(name string) error {
	return &openai.Error{Class: ErrNotFound, Param: "model",
		Msg: "The model `" + name + "` does not exist. Served models: " + strings.Join(m.names, ", ")}
}

// bodyModel reads the top-level "model" string of a JSON body; ok is false when there is none.
func bodyModel(ctx *fasthttp.RequestCtx) (string, bool) {
	raw := openai.TopLevelField(ctx.PostBody(), "model")
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil || s == "" {
		return "", false
	}
	return s, true
}

// InFlight is the requests in flight over all models (the drain waits on it).
func (m *Models) InFlight() int64 {
	var n int64
	for _, a := range m.apis {
		n += a.InFlight()
	}
	return n
}

// CancelInFlight cancels every model's requests in flight (the drain's last step).
func (m *Models) CancelInFlight() {
	for _, a := range m.apis {
		a.CancelInFlight()
	}
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// card is a model's entry in /v1/models, as vLLM writes it.
func (m *Models) card(a *OpenAIAPI) modelCard {
	return modelCard{ID: a.ModelName, Object: "model", Created: m.created, OwnedBy: "kvroute", Root: a.ModelName}
}

// servesPath reports whether path is one of the OpenAI endpoints an OpenAIAPI answers.
func servesPath(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", "/v1/score", "/score",
		"/v1/rerank", "/rerank", "/v2/rerank", "/tokenize", "/detokenize":
		return true
	}
	return false
}
