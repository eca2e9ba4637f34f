package client

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// metricsFixture is a vLLM v0.11-style exposition (two engines), trimmed.
const metricsFixture = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-VL-2B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-VL-2B-Instruct"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-VL-2B-Instruct"} 2.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-VL-2B-Instruct"} 0.0
vllm:gpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-VL-2B-Instruct"} 0.9
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-VL-2B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-VL-2B-Instruct"} 0.75
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1234.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="27306",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",swap_space="4"} 1.0
python_gc_objects_collected_total{generation="0"} 1.0
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics([]byte(metricsFixture))
	if err != nil {
		t.Fatal(err)
	}
	if m.BlockSize != 16 || m.NumGPUBlocks != 27306 || m.Running != 4 || m.Waiting != 2 || m.KVUsage != 0.5 || len(m.Engines) != 2 {
		t.Fatalf("%+v", m)
	}
	old := strings.ReplaceAll(metricsFixture, "vllm:kv_cache_usage_perc", "vllm:other")
	if m, err = ParseMetrics([]byte(old)); err != nil || m.Engines[0].KVUsage != 0.9 {
		t.Fatalf("deprecated gauge: %+v %v", m, err)
	}
	for _, bad := range []string{
		"vllm:num_requests_running{engine=\"0\" 3.0",
		"vllm:num_requests_running{engine=\"0\"} x",
		"vllm:num_requests_running",
		`vllm:cache_config_info{block_size="sixteen"} 1.0`,
	} {
		if _, err := ParseMetrics([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte(metricsFixture))
	f.Add([]byte(`vllm:cache_config_info{block_size="1\"6",x="}"} 1`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMetrics(b)
		if err == nil && m.KVUsage != m.KVUsage && len(m.Engines) == 0 {
			t.Fatal("NaN usage without engines")
		}
	})
}

// TestFirstTokenDetection feeds chunk shapes of vLLM and the mocker through a Stream.
func TestFirstTokenDetection(t *testing.T) {
	tests := []struct {
		name  string
		chunk string
		first bool
	}{
		{"role only", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, false},
		{"empty text", `{"choices":[{"index":0,"text":"","finish_reason":null}]}`, false},
		{"null content", `{"choices":[{"index":0,"delta":{"content":null}}]}`, false},
		{"chat content", `{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`, true},
		{"completion text", `{"choices":[{"index":0,"text":" the"}]}`, true},
		{"reasoning", `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, true},
		{"tool call", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}`, true},
		{"token ids", `{"choices":[{"text":"","token_ids":[5]}]}`, true},
		{"finish without text", `{"choices":[{"text":"","finish_reason":"length"}]}`, true},
		{"usage only", `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, true},
		{"usage zero completion", `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0,"total_tokens":3}}`, false},
		{"error event", `{"error":{"message":"x","code":500}}`, false},
		{"not json", `keep-alive`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := 0
			s := &Stream{onFirst: func() { called++ }}
			ev := Event{Data: []byte(tc.chunk)}
			s.inspect(&ev)
			if ev.FirstToken != tc.first || (called == 1) != tc.first || s.SawFirstToken() != tc.first {
				t.Fatalf("first %v called %d", ev.FirstToken, called)
			}
			if tc.name == "error event" && !ev.Error {
				t.Fatal("error event not marked")
			}
		})
	}
}

// TestSSEFraming: comments, CRLF line ends, multi-line data, events split across TCP writes, a long line.
func TestSSEFraming(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	events := []string{
		": keep-alive comment\n\n",
		"event: message\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n",
		"data: line1\ndata: line2\n\n",
		"data: {\"choices\":[{\"text\":\"" + long + "\"}]}\n\n",
		"data: [DONE]\n\n",
	}
	srv := hijackServer(t, func(conn net.Conn, rw *bufio.ReadWriter) {
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		all := strings.Join(events, "")
		for len(all) > 0 { // odd chunk sizes split lines and events
			n := min(len(all), 7919)
			rw.WriteString(itoaHex(n) + "\r\n" + all[:n] + "\r\n")
			rw.Flush()
			all = all[n:]
		}
		rw.WriteString("0\r\n\r\n")
		rw.Flush()
	})
	e := newEndpoint(t, srv.URL, Config{ReadBufferSize: 4096})
	s, err := e.Stream(context.Background(), &Request{Path: "/v1/completions", Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantData := []string{"", `{"choices":[{"text":"a"}]}`, "line1\nline2", `{"choices":[{"text":"` + long + `"}]}`, "[DONE]"}
	for i, want := range wantData {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(ev.Raw) != events[i] || string(ev.Data) != want {
			t.Fatalf("event %d: raw %.80q data %.80q", i, ev.Raw, ev.Data)
		}
		if ev.FirstToken != (i == 1) || ev.Done != (i == 4) {
			t.Fatalf("event %d: first %v done %v", i, ev.FirstToken, ev.Done)
		}
	}
	if _, err := s.Next(); err == nil {
		t.Fatal("no EOF after the last chunk")
	}
}

// TestRequestWire: the request as a net/http server reads it: method, path, Host, body with its length
// and type, extra headers; a CR or LF in a header value cannot start a header of its own.
func TestRequestWire(t *testing.T) {
	type seen struct {
		method, path, host, ctype, accept, id, rank, injected string
		length                                                int64
		body                                                  string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.Path, r.Host, r.Header.Get("Content-Type"), r.Header.Get("Accept"),
			r.Header.Get("X-Request-Id"), r.Header.Get("X-data-parallel-rank"), r.Header.Get("Injected"), r.ContentLength, string(b)}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	e := newEndpoint(t, srv.URL, Config{})
	host := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name   string
		req    Request
		stream bool
		want   seen
	}{
		{"post", Request{Path: "/v1/completions", Body: []byte(`{"prompt":[1]}`), Headers: []Header{{"X-Request-Id", "r1"}, {"X-data-parallel-rank", "1"}}}, false,
			seen{method: "POST", path: "/v1/completions", host: host, ctype: "application/json", id: "r1", rank: "1", length: 14, body: `{"prompt":[1]}`}},
		{"stream", Request{Path: "/v1/chat/completions", Body: []byte(`{}`)}, true,
			seen{method: "POST", path: "/v1/chat/completions", host: host, ctype: "application/json", accept: "text/event-stream", length: 2, body: `{}`}},
		{"get", Request{Path: "/health"}, false, seen{method: "GET", path: "/health", host: host}},
		{"injection", Request{Path: "/a b", Body: []byte(`{}`), Headers: []Header{{"X-Request-Id", "x\r\nInjected: yes"}}}, false,
			seen{method: "POST", path: "/a b", host: host, ctype: "application/json", id: "x  Injected: yes", length: 2, body: `{}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.stream {
				var s *Stream
				if s, err = e.Stream(context.Background(), &tc.req, nil); err == nil {
					s.Close()
				}
			} else {
				var resp Response
				err = e.Do(context.Background(), &tc.req, &resp)
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := <-got; g != tc.want {
				t.Fatalf("got %+v\nwant %+v", g, tc.want)
			}
		})
	}
}
