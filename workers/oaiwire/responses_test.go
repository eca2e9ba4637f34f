package oaiwire

import (
	"errors"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

func TestResponsesChat(t *testing.T) {
	tests := []struct {
		name, in, want, err string
	}{
		{name: "string input with instructions",
			in:   `{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":5,"stream":true}`,
			want: `{"max_tokens":5,"messages":[{"content":"Be brief.","role":"system"},{"content":"Hi","role":"user"}],"model":"m","stream":true}`},
		{name: "items, tools and a named tool choice",
			in: `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"Weather?"}]},` +
				`{"type":"function_call","call_id":"c1","name":"w","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"sunny"}],` +
				`"tools":[{"type":"function","name":"w","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"w"}}`,
			want: `{"messages":[{"content":[{"text":"Weather?","type":"text"}],"role":"user"},` +
				`{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"w"},"id":"c1","type":"function"}]},` +
				`{"content":"sunny","role":"tool","tool_call_id":"c1"}],"model":"m","stream":false,` +
				`"tool_choice":{"function":{"name":"w"},"type":"function"},"tools":[{"function":{"description":"","name":"w","parameters":{"type":"object"}},"type":"function"}]}`},
		{name: "previous response", in: `{"model":"m","input":"x","previous_response_id":"resp_1"}`, err: "previous_response_id"},
		{name: "no input", in: `{"model":"m"}`, err: "input is required"},
		{name: "bad item", in: `{"model":"m","input":[{"type":"reasoning"}]}`, err: "unsupported item type"},
		{name: "bad json", in: `{"model":`, err: "invalid JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResponsesChat([]byte(tc.in))
			if tc.err != "" {
				if !errors.Is(err, ErrResponses) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			_ = json.Unmarshal(got, &g)
			_ = json.Unmarshal([]byte(tc.want), &w)
			gb, _ := json.Marshal(g)
			wb, _ := json.Marshal(w)
			if string(gb) != string(wb) {
				t.Fatalf("got  %s\nwant %s", gb, wb)
			}
		})
	}
}

// Any bytes give a chat body or an ErrResponses error, never a panic.
func FuzzResponsesChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"tools":[{"type":"function","name":"w"}],"tool_choice":"required"}`))
	f.Add([]byte(`{"model":"m","input":"x","instructions":"y"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := ResponsesChat(b)
		if err != nil && !errors.Is(err, ErrResponses) {
			t.Fatalf("unclassed error %v", err)
		}
		if err == nil && !json.Valid(out) {
			t.Fatalf("invalid chat body %s", out)
		}
	})
}
