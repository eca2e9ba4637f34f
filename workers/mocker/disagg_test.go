package mocker

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/kvroute/kvroute/internal/testutil"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// TestEngineRemoteBlocksArePulledNotComputed: a decode request whose prompt blocks come from a prefill
// engine computes only the tokens past them, and stores the pulled blocks with one BlockStored.
func TestEngineRemoteBlocksArePulledNotComputed(t *testing.T) {
	e := testEngine(t, nil) // block size 4
	prompt := seq(100, 30)  // 7 full blocks, 2 tokens past them
	must(t, e.Add(Request{ID: "d", Prompt: prompt, MaxTokens: 2, RemoteBlocks: 7}))
	res := e.Step()
	if res.PrefillTokens != 2 {
		t.Fatalf("computed %d prompt tokens, want the 2 past the 7 pulled blocks", res.PrefillTokens)
	}
	if len(res.Events) != 1 || res.Events[0].Kind != EventStored || len(res.Events[0].Hashes) != 7 {
		t.Fatalf("events %+v, want one BlockStored of the 7 pulled blocks", res.Events)
	}
	if len(res.Progress) != 1 || !res.Progress[0].First || res.Progress[0].CachedTokens != 0 {
		t.Fatalf("progress %+v: want the first token at once, no local cache hit", res.Progress)
	}
	// The same prompt without remote blocks computes all of it (one token short is the cap of a hit, but
	// nothing is cached on a fresh engine).
	f := testEngine(t, nil)
	must(t, f.Add(Request{ID: "a", Prompt: prompt, MaxTokens: 2}))
	if got := f.Step().PrefillTokens; got != 30 {
		t.Fatalf("aggregated prefill computed %d tokens, want 30", got)
	}
}

// TestEngineRemoteDecodeReportsBlockIDs: a prefill request's last step names its full prompt blocks.
func TestEngineRemoteDecodeReportsBlockIDs(t *testing.T) {
	e := testEngine(t, nil)
	must(t, e.Add(Request{ID: "p", Prompt: seq(1, 30), MaxTokens: 1, RemoteDecode: true}))
	res := e.Step()
	if len(res.Progress) != 1 || !res.Progress[0].Done || len(res.Progress[0].BlockIDs) != 7 {
		t.Fatalf("progress %+v, want done with 7 block ids", res.Progress)
	}
}

func TestTransferTime(t *testing.T) {
	c := KVTransferConfig{}
	// 1000 tokens × 114,688 B at 64 GB/s = 1.792 ms.
	if got := c.TransferTime(1000, 1); got != 1792*time.Microsecond {
		t.Fatalf("default transfer of 1000 tokens %v, want 1.792ms", got)
	}
	if got := (KVTransferConfig{Bandwidth: 1e9, KVBytesPerToken: 1000}).TransferTime(500, 2); got != 250*time.Microsecond {
		t.Fatalf("got %v, want 250µs", got)
	}
}

type kvResp struct {
	completionResp
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
}

// TestHTTPPrefillThenDecode runs vLLM's NixlConnector handshake through the OpenAI API between two
// mockers: the prefill answer carries kv_transfer_params naming its engine, blocks, host and port; the
// decode worker given them pulls the blocks (waiting the bandwidth model's transfer time), stores them
// with BlockStored and streams the answer.
func TestHTTPPrefillThenDecode(t *testing.T) {
	pre := startTestWorker(t, nil)
	const bw = 1e6 // bytes/s: slow enough that the transfer shows through the speedup ratio of 1000
	dec := startTestWorker(t, func(c *WorkerConfig) { c.KVTransfer.Bandwidth = bw })
	prompt := seq(500, 200) // 12 full blocks of 16
	status, body := postJSON(t, pre.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt,
		"max_tokens": 1, "stream": false, "kv_transfer_params": map[string]any{"do_remote_decode": true,
			"do_remote_prefill": false, "remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}})
	if status != 200 {
		t.Fatalf("prefill status %d: %s", status, body)
	}
	var pr kvResp
	must(t, json.Unmarshal(body, &pr))
	kt := pr.KVTransferParams
	host, port, _ := net.SplitHostPort(pre.Addr())
	if kt == nil || !kt.DoRemotePrefill || kt.DoRemoteDecode || len(kt.RemoteBlockIDs) != 12 || kt.RemoteEngineID == nil ||
		*kt.RemoteEngineID != "kvroute-mocker-0-dp0" || kt.RemoteHost == nil || *kt.RemoteHost != host ||
		kt.RemotePort == nil || strconv.Itoa(*kt.RemotePort) != port || kt.TPSize != 1 {
		t.Fatalf("prefill kv_transfer_params %s", body)
	}
	if pr.Usage.CompletionTokens != 1 {
		t.Fatalf("prefill generated %d tokens, want 1", pr.Usage.CompletionTokens)
	}

	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 5, "stream": true, "kv_transfer_params": kt})
	start := time.Now()
	resp, err := http.Post(dec.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
	must(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var firstAt time.Duration
	chunks := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || line == "data: [DONE]" {
			continue
		}
		if chunks == 0 {
			firstAt = time.Since(start)
		}
		chunks++
	}
	if resp.StatusCode != 200 || chunks != 5 {
		t.Fatalf("decode status %d, %d chunks, want 200 and 5", resp.StatusCode, chunks)
	}
	// 192 pulled tokens × 114,688 B / (1e6 B/s) / speedup 1000 = 22 ms before the first token.
	if want := (KVTransferConfig{Bandwidth: bw}).TransferTime(192, 1000); firstAt < want {
		t.Fatalf("first decode token after %v, before the %v transfer", firstAt, want)
	}
	testutil.Eventually(t, "decode worker idle", dec.Idle)
	var stored int
	for _, bt := range dec.rec[0].snapshot() {
		for _, ev := range bt.Events {
			if ev.Kind == kvevents.Stored {
				stored += len(ev.BlockHashes)
			}
		}
	}
	if stored != 12 {
		t.Fatalf("decode worker announced %d stored blocks, want the 12 pulled ones", stored)
	}
	if st := dec.Stats(0); st.PrefixHits != 0 {
		t.Fatalf("decode counted %d prefix hits for pulled blocks", st.PrefixHits)
	}
}

func TestHTTPKVTransferParamsRefused(t *testing.T) {
	w := startTestWorker(t, nil)
	for name, body := range map[string]map[string]any{
		"both flags":         {"do_remote_decode": true, "do_remote_prefill": true},
		"decode w/o remote":  {"do_remote_prefill": true, "remote_block_ids": []int{1}},
		"streamed prefill":   {"do_remote_decode": true, "stream": true},
		"block ids not list": {"do_remote_prefill": true, "remote_block_ids": "x"},
	} {
		req := map[string]any{"model": "m", "prompt": seq(1, 40), "max_tokens": 1, "kv_transfer_params": body}
		if s, ok := body["stream"]; ok {
			req["stream"] = s
			delete(body, "stream")
		}
		if status, out := postJSON(t, w.URL()+"/v1/completions", req); status != 400 {
			t.Errorf("%s: status %d %s, want 400", name, status, out)
		}
	}
}
