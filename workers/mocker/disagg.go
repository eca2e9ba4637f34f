package mocker

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/goccy/go-json"
)

// Disaggregated prefill/decode, as vLLM's NixlConnector runs it through the OpenAI API. Any mocker plays
// either role (vLLM's kv_role "kv_both"); the request's kv_transfer_params say which:
//
//   - prefill: {"do_remote_decode": true, ...nulls}, max_tokens 1, not streamed. The engine computes the
//     prompt (emitting BlockStored as usual) and the response carries kv_transfer_params for the decode
//     side: do_remote_prefill true, the prompt's full block ids, this engine's id, host and port.
//   - decode: {"do_remote_prefill": true, "remote_block_ids": [...], "remote_engine_id", "remote_host",
//     "remote_port"}. The worker "pulls" the blocks it does not hold (the transfer time of the bandwidth
//     model below, on the worker's clock), then the engine stores them (BlockStored, as vLLM's decode
//     side does once the KV landed), computes the rest of the prompt and decodes.

// DefaultKVBytesPerToken is the KV cache size of one token of the default model (Qwen3-VL-2B, bf16):
// layers × 2 × kv_heads × head_dim × dtype bytes = 28 × 2 × 8 × 128 × 2.
const DefaultKVBytesPerToken = 28 * 2 * 8 * 128 * 2

// DefaultKVTransferBandwidth is Dynamo's mocker default, 64 GB/s.
const DefaultKVTransferBandwidth = 64e9

// KVTransferConfig is the KV transfer model of a decode worker pulling a prefill worker's blocks:
// transfer_time = pulled tokens × KVBytesPerToken / Bandwidth, divided by the speedup ratio.
type KVTransferConfig struct {
	// Bandwidth is the transfer bandwidth in bytes per second. Default 64e9 (Dynamo's
	// --kv-transfer-bandwidth 64 GB/s).
	Bandwidth float64
	// KVBytesPerToken is the KV size of one token. Default DefaultKVBytesPerToken.
	KVBytesPerToken int
}

// TransferTime is how long pulling tokens takes at speedup ratio speedup.
func (c KVTransferConfig) TransferTime(tokens int, speedup float64) time.Duration {
	bw, per := c.Bandwidth, c.KVBytesPerToken
	if bw <= 0 {
		bw = DefaultKVTransferBandwidth
	}
	if per <= 0 {
		per = DefaultKVBytesPerToken
	}
	if speedup <= 0 {
		speedup = 1
	}
	sec := float64(tokens) * float64(per) / bw / speedup
	return time.Duration(sec * float64(time.Second))
}

// KVTransferParams is vLLM's kv_transfer_params (NixlConnector) on requests and responses.
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int32 `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
}

// engineID names a rank's engine in kv_transfer_params (vLLM's engine_id, a uuid per engine).
func (w *Worker) engineID(rank int) string {
	return "kvroute-mocker-" + strconv.Itoa(w.cfg.ID) + "-dp" + strconv.Itoa(rank)
}

// applyKVTransfer reads a request's kv_transfer_params into it (RemoteDecode or RemoteBlocks).
func (w *Worker) applyKVTransfer(p *prepared, kt *KVTransferParams) error {
	if kt == nil {
		return nil
	}
	switch {
	case kt.DoRemoteDecode && kt.DoRemotePrefill:
		return fmt.Errorf("%w: kv_transfer_params: do_remote_decode and do_remote_prefill are exclusive", ErrBadRequest)
	case kt.DoRemoteDecode:
		if p.stream {
			return fmt.Errorf("%w: kv_transfer_params.do_remote_decode needs a non-streamed request", ErrBadRequest)
		}
		p.req.RemoteDecode = true
	case kt.DoRemotePrefill:
		if kt.RemoteEngineID == nil || kt.RemoteHost == nil || kt.RemotePort == nil || kt.RemoteBlockIDs == nil {
			return fmt.Errorf("%w: kv_transfer_params.do_remote_prefill needs remote_engine_id, remote_block_ids, remote_host and remote_port", ErrBadRequest)
		}
		p.req.RemoteBlocks = len(kt.RemoteBlockIDs)
	}
	return nil
}

// pullDelay is the transfer time of a decode request on the rank it picks (returned, so the request is
// submitted where the estimate was made): the blocks it pulls are the remote ones the rank does not hold.
func (w *Worker) pullDelay(rank int, req Request) (time.Duration, int) {
	if req.RemoteBlocks == 0 {
		return 0, rank
	}
	bs := w.cfg.Engine.BlockSize
	r, err := w.pickRank(rank)
	if err != nil {
		return 0, rank
	}
	r.mu.Lock()
	hit := r.eng.PrefixHitTokens(req) / bs
	r.mu.Unlock()
	pulled := min(req.RemoteBlocks, (len(req.Prompt)-1)/bs) - hit
	if pulled <= 0 {
		return 0, r.idx
	}
	return w.cfg.KVTransfer.TransferTime(pulled*bs, w.cfg.Engine.SpeedupRatio), r.idx
}

// wait blocks for d on the worker's clock (false when the worker stops first).
func (w *Worker) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := w.cfg.Clock.NewTimer()
	defer t.Stop()
	t.Reset(d)
	select {
	case <-t.C():
		return true
	case <-w.stop:
		return false
	}
}

// appendKVTransfer appends the prefill response's kv_transfer_params to a JSON object body.
func (w *Worker) appendKVTransfer(body []byte, rank int, blocks []int32) []byte {
	if len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	host, portStr, _ := net.SplitHostPort(w.Addr())
	port, _ := strconv.Atoi(portStr)
	id := w.engineID(rank)
	if blocks == nil {
		blocks = []int32{}
	}
	kt := KVTransferParams{DoRemotePrefill: true, RemoteEngineID: &id, RemoteBlockIDs: blocks, RemoteHost: &host, RemotePort: &port, TPSize: 1}
	b, err := json.Marshal(kt)
	if err != nil {
		return body
	}
	body = append(body[:len(body)-1], `,"kv_transfer_params":`...)
	body = append(body, b...)
	return append(body, '}')
}
