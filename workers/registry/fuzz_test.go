package registry

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

// flagForm writes sp in Parse's key=value form, and false when a value cannot be written in it (a comma,
// or surrounding space, which Parse trims).
func flagForm(sp Spec) (string, bool) {
	fields := []struct{ k, v string }{
		{"url", sp.URL}, {"events", sp.Events}, {"replay", sp.Replay}, {"topic", sp.Topic},
		{"device", sp.Device}, {"curve_key", sp.CurveKey}, {"role", sp.Role}, {"model", sp.Model},
		{"api_key", sp.APIKey}, {"api_key_env", sp.APIKeyEnv}, {"mm_scheme", sp.MMScheme}, {"engine", sp.Engine},
	}
	out := []string{"id=" + strconv.FormatUint(sp.ID, 10)}
	for _, f := range fields {
		if f.v == "" {
			continue
		}
		if strings.Contains(f.v, ",") || strings.TrimSpace(f.v) != f.v {
			return "", false
		}
		out = append(out, f.k+"="+f.v)
	}
	for _, f := range []struct {
		k string
		v int
	}{{"dp_size", sp.DPSize}, {"block_size", sp.BlockSize}, {"total_kv_blocks", sp.TotalKVBlocks}, {"max_num_batched_tokens", sp.MaxNumBatchedTokens}} {
		if f.v != 0 {
			out = append(out, f.k+"="+strconv.Itoa(f.v))
		}
	}
	return strings.Join(out, ","), true
}

// checkSpec asserts what every accepted spec holds, whichever form it came in: it validates, and it
// survives the JSON form (the admin API, NATS discovery records) and the flag form unchanged.
func checkSpec(t *testing.T, sp Spec) {
	t.Helper()
	if err := sp.Validate(); err != nil {
		t.Fatalf("accepted spec %+v does not validate: %v", sp, err)
	}
	b, err := json.Marshal(sp)
	if err != nil {
		t.Fatalf("marshal %+v: %v", sp, err)
	}
	back, err := ParseJSON(b)
	if err != nil {
		t.Fatalf("JSON form %s of an accepted spec is refused: %v", b, err)
	}
	if back != sp {
		t.Fatalf("JSON round trip: %+v -> %s -> %+v", sp, b, back)
	}
	if s, ok := flagForm(sp); ok {
		back, err := Parse(s)
		if err != nil {
			t.Fatalf("flag form %q of an accepted spec is refused: %v", s, err)
		}
		if back != sp {
			t.Fatalf("flag round trip: %+v -> %q -> %+v", sp, s, back)
		}
	}
	// Every rank of an accepted spec has a valid events and replay endpoint: the fleet subscribes to
	// them without checking again.
	for _, ep := range []string{sp.Events, sp.Replay} {
		if ep == "" {
			continue
		}
		for r := 0; r < sp.DPRanks(); r++ {
			got, err := RankEndpoint(ep, r)
			if err != nil || !validZMQEndpoint(got) {
				t.Fatalf("accepted spec %+v: rank %d of %q: %q, %v", sp, r, ep, got, err)
			}
		}
	}
}

// Parse (--worker flags, the worker spec strings of the static config) refuses every malformed spec with
// ErrBadSpec and accepts only specs that validate and round-trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"id=1,url=http://127.0.0.1:8001,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,dp_size=2,block_size=16,total_kv_blocks=1000,max_num_batched_tokens=8192,device=cpu,topic=kv@a:1@m",
		"id=7", " id = 3 , url = http://h:1 ", "url=http://h:1", "id=1,role=prefill", "id=1,mm_scheme=block_mm_infos",
		"id=1,url=http://[::1]:8000/v1", "id=1,events=ipc:///tmp/x,replay=ipc:///tmp/y", "id=2,events=tcp://h:65535,replay=tcp://h:65535,dp_size=2",
		"id=1,api_key=sk-1", "id=1,curve_key=" + strings.Repeat("a", 40), "id=18446744073709551615", "id=1,dp_size=1025",
		"id=1,url=http://h:1?x", "id=1,url=http://user@h:1", "id=1,=,", "id=1,block_size=65536", "id=1,engine=trtllm", "id=1,engine=tgi",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrBadSpec) {
				t.Fatalf("Parse(%q): error %v is not ErrBadSpec", s, err)
			}
			return
		}
		checkSpec(t, sp)
	})
}

// ParseJSON (POST /v1/workers, NATS discovery records) refuses every malformed body with ErrBadSpec and
// accepts only specs that validate and round-trip.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":3,"url":"http://127.0.0.1:8001","events":"tcp://127.0.0.1:5557","block_size":16}`,
		`{"id":4,"role":"prefill"}`, `{"id":4}`, `{}`, `{"id":-1}`, `{"id":1,"typo":2}`, `[`, `{"id":1,"device":"x"}`,
		`{"id":1,"role":"x"}`, `{"id":1} {"id":2}`, `{"id":1,"id":2}`, `{"ID":5,"URL":"http://h:1"}`, `{"id":1e3}`,
		`{"id":1,"dp_size":2,"events":"tcp://h:5557","replay":"tcp://h:65535"}`, `{"id":1,"model":"\u00e9\ud800"}`,
		`{"id":1,"api_key":"a\nb"}`, `null`, `{"id":null}`, `{"id":1,"block_size":1.5}`, `{"id":1,"engine":"sglang"}`, `{"id":1,"engine":"TRTLLM"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := ParseJSON(b)
		if err != nil {
			if !errors.Is(err, ErrBadSpec) {
				t.Fatalf("ParseJSON(%q): error %v is not ErrBadSpec", b, err)
			}
			return
		}
		checkSpec(t, sp)
	})
}
