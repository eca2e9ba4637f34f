package openai

import (
	stdjson "encoding/json"
	"errors"
	"strconv"
	"testing"

	json "github.com/goccy/go-json"
)

// Seed corpora live in testdata/fuzz/Fuzz*; run with
//
//	go test ./frontend/openai -run '^$' -fuzz FuzzParseChat -fuzztime 30s

// checkClassified fails unless err is an *Error of one of the classes.
func checkClassified(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || classOf(err) == nil {
		t.Fatalf("unclassified error %T: %v", err, err)
	}
}

func FuzzParseChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:x"},"uuid":"a"}]}],"stream":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChat(body)
		if err != nil {
			checkClassified(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if err := r.Validate(Limits{}, nil); err != nil {
			checkClassified(t, err)
		}
		if len(r.Media) > 0 {
			uuids := make([]string, len(r.Media))
			for i := range uuids {
				uuids[i] = "u" + strconv.Itoa(i)
			}
			out, err := SetMediaUUIDs(body, r.Media, uuids)
			if err != nil {
				t.Fatalf("SetMediaUUIDs: %v", err)
			}
			r2, err := ParseChat(out)
			if err != nil {
				t.Fatalf("rewritten body does not parse: %v\n%s", err, out)
			}
			if len(r2.Media) != len(r.Media) {
				t.Fatalf("media %d -> %d", len(r.Media), len(r2.Media))
			}
			for i, p := range r2.Media {
				if p.UUID != uuids[i] {
					t.Fatalf("media %d uuid %q, want %q\n%s", i, p.UUID, uuids[i], out)
				}
			}
			// Inline every URL as the frontend does with a downloaded image, with the uuids set in the
			// same pass.
			urls := make([]string, len(r.Media))
			for i, p := range r.Media {
				if p.URL != "" {
					urls[i] = "data:image/png;base64,QQ==#" + strconv.Itoa(i)
				}
			}
			out, err = RewriteMedia(body, r.Media, uuids, urls, "k", make([][]byte, len(r.Media)))
			if err != nil {
				t.Fatalf("RewriteMedia: %v", err)
			}
			r3, err := ParseChat(out)
			if err != nil || len(r3.Media) != len(r.Media) {
				t.Fatalf("inlined body: %v\n%s", err, out)
			}
			for i, p := range r3.Media {
				want := urls[i]
				if want == "" {
					want = r.Media[i].URL
				}
				if p.URL != want || p.UUID != uuids[i] {
					t.Fatalf("media %d: url %q uuid %q, want %q %q\n%s", i, p.URL, p.UUID, want, uuids[i], out)
				}
			}
		}
		out, err := SetField(body, "nvext", []byte(`{"return_routing":true}`))
		if err != nil || !json.Valid(out) {
			t.Fatalf("SetField: %v\n%s", err, out)
		}
		if raw := TopLevelField(out, "nvext"); string(raw) != `{"return_routing":true}` {
			t.Fatalf("nvext after SetField: %s", raw)
		}
	})
}

func FuzzParseCompletion(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":[1,2,3]}`))
	f.Add([]byte(`{"model":"m","prompt":"hello","max_tokens":4}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseCompletion(body)
		if err != nil {
			checkClassified(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if err := r.Validate(Limits{}, nil); err != nil {
			checkClassified(t, err)
			return
		}
		if r.Prompt.Len() != 1 {
			t.Fatalf("valid request with %d prompts", r.Prompt.Len())
		}
		out, err := DeleteField(body, "prompt")
		if err != nil || !json.Valid(out) || TopLevelField(out, "prompt") != nil {
			t.Fatalf("DeleteField: %v\n%s", err, out)
		}
		if _, _, err := ParseUsage(body); err != nil && TopLevelField(body, "usage") == nil {
			t.Fatalf("ParseUsage failed without usage: %v", err)
		}
	})
}

// FuzzTokenIDs checks the hand-rolled token-id parser against the decoder: on valid JSON both agree,
// and invalid JSON is never accepted.
func FuzzTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[ 0 , 4294967295 ]`, `[4294967296]`, `[1.5]`, `[01]`, `[1,]`, `[]`, `[-1]`, `[1e2]`, "[1\n,\t2]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '[' {
			return
		}
		ids, ok := parseTokenIDs(b)
		if !json.Valid(b) {
			if ok {
				t.Fatalf("accepted invalid JSON %q", b)
			}
			return
		}
		var want []uint32
		werr := json.Unmarshal(b, &want)
		if ok != (werr == nil) {
			t.Fatalf("%q: parser ok=%v, decoder err=%v", b, ok, werr)
		}
		if ok && len(ids) != len(want) {
			t.Fatalf("%q: %v vs %v", b, ids, want)
		}
		for i := range ids {
			if ids[i] != want[i] {
				t.Fatalf("%q: %v vs %v", b, ids, want)
			}
		}
	})
}

// referenceMedia reads the media parts of a chat body with encoding/json's generic decoding: member
// names exact (map keys), the last of repeated keys wins, as vLLM's parser reads a body.
func referenceMedia(body []byte) (types, urls []string, ok bool) {
	var doc map[string]any
	if stdjson.Unmarshal(body, &doc) != nil {
		return nil, nil, false
	}
	msgs, _ := doc["messages"].([]any)
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		parts, _ := mm["content"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			typ, _ := pm["type"].(string)
			if !isMediaType(typ) {
				continue
			}
			url := ""
			for _, k := range []string{"image_url", "video_url", "audio_url"} {
				switch v := pm[k].(type) {
				case map[string]any:
					url, _ = v["url"].(string)
				case string:
					url = v
				}
			}
			types, urls = append(types, typ), append(urls, url)
		}
	}
	return types, urls, true
}

// FuzzScanMedia: whatever ParseChat accepts, its media parts (what the SSRF guard checks and the rewrite
// edits) are the ones a case-sensitive generic decoder finds: same count, types and image/video URLs.
func FuzzScanMedia(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/x.png"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"d","URL":"e"}}]}]}`,
		`{"model":"m","Messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"e"}}]}],"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","Content":[{"type":"image_url","image_url":{"url":"e"}}],"content":[{"type":"text","text":"a"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"a"},"image_url":{"url":"b"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"a"},"uuid":"u"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"a"},"video_url":{"url":"b"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"typ\u0065":"image_url","image_url":{"ur\u006c":"a"}}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChat(body)
		if err != nil {
			return
		}
		types, urls, ok := referenceMedia(body)
		if !ok {
			return // the reference refuses it (invalid UTF-8 handling differs); ParseChat's verdict stands
		}
		if len(types) != len(r.Media) {
			t.Fatalf("%d media parts, the reference reads %d\n%s", len(r.Media), len(types), body)
		}
		for i, p := range r.Media {
			if p.Type != types[i] || ((p.Type == "image_url" || p.Type == "video_url") && p.URL != urls[i]) {
				t.Fatalf("part %d: %s %q, the reference reads %s %q\n%s", i, p.Type, p.URL, types[i], urls[i], body)
			}
		}
	})
}
