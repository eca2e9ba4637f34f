package model

import (
	"math/rand/v2"
	"strconv"
	"testing"

	json "github.com/goccy/go-json"
)

// TestNativeFixtureSelected guards the source hash: editing the fixture template must come with a new hash (and
// a native renderer that still matches gonja), or requests silently fall back to the slow path.
func TestNativeFixtureSelected(t *testing.T) {
	if fixture(t).ChatTemplate.native == nil {
		t.Fatalf("fixture template (sha256 %s) has no native renderer", sourceHash(fixture(t).ChatTemplate.Source))
	}
}

// TestNativeMatchesGonja renders 2,000 random conversations (every role, null / string / part contents, images,
// videos, unknown part types, tool calls with object / array / invalid arguments, tools, add_vision_id) with the
// native renderer and with gonja; the outputs must be equal byte for byte.
func TestNativeMatchesGonja(t *testing.T) {
	m := fixture(t)
	slow := *m.ChatTemplate
	slow.native = nil
	corpus := readCorpus(t)
	rng := rand.New(rand.NewPCG(5, 6))
	text := func() string {
		if rng.IntN(8) == 0 {
			return ""
		}
		return corpus[rng.IntN(len(corpus))]
	}
	content := func() Content {
		switch rng.IntN(5) {
		case 0:
			return Content{Null: true}
		case 1, 2:
			return TextContent(text())
		}
		var parts []ContentPart
		for n := rng.IntN(4); n >= 0; n-- {
			switch rng.IntN(6) {
			case 0:
				parts = append(parts, ContentPart{Type: "image_url", ImageURL: &MediaURL{URL: "https://x/" + strconv.Itoa(rng.IntN(9))}})
			case 1:
				parts = append(parts, ContentPart{Type: "video_url", VideoURL: &MediaURL{URL: "v"}})
			case 2:
				parts = append(parts, ContentPart{Type: "input_audio"})
			case 3:
				parts = append(parts, ContentPart{Type: "image"})
			default:
				parts = append(parts, ContentPart{Type: "text", Text: text()})
			}
		}
		if rng.IntN(10) == 0 {
			parts = nil
		}
		return PartsContent(parts...)
	}
	args := []string{`{"city": "Zürich", "n": 1.5, "deep": {"a": [1, null, true, 1e-7, 12345678901234567890]}}`, `[1,2]`, `not json`, `{}`, `{"q":"\"quoted\"\n"}`}
	roles := []string{"user", "user", "assistant", "assistant", "tool", "tool", "system", "developer"}
	tools := []json.RawMessage{
		json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"°C — “quoted”","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`),
		json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"x":0.5,"y":[]}}}`),
	}
	for conv := 0; conv < 2000; conv++ {
		var msgs []Message
		for n := 1 + rng.IntN(6); n > 0; n-- {
			msg := Message{Role: roles[rng.IntN(len(roles))], Content: content()}
			if msg.Role == "assistant" && rng.IntN(3) == 0 {
				for k := rng.IntN(3); k >= 0; k-- {
					msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: "c", Type: "function", Function: FunctionCall{Name: "get_weather", Arguments: args[rng.IntN(len(args))]}})
				}
			}
			msgs = append(msgs, msg)
		}
		opts := ChatOptions{AddGenerationPrompt: rng.IntN(2) == 0}
		if rng.IntN(3) == 0 {
			opts.Tools = tools[:1+rng.IntN(len(tools))]
		}
		switch rng.IntN(4) {
		case 0:
			opts.Kwargs = map[string]any{"add_vision_id": true}
		case 1:
			opts.Kwargs = map[string]any{"add_vision_id": "", "enable_thinking": false}
		}
		fast, errF := m.ChatTemplate.Render(msgs, opts)
		want, errS := slow.Render(msgs, opts)
		if (errF != nil) != (errS != nil) || fast != want {
			js, _ := json.Marshal(msgs)
			t.Fatalf("conversation %d differs (native err %v, gonja err %v)\nmessages %s\nopts %+v\n got: %q\nwant: %q", conv, errF, errS, js, opts, fast, want)
		}
	}
}
