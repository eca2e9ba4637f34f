package epp

import (
	"context"
	"io"
	"slices"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	json "github.com/goccy/go-json"
	"google.golang.org/grpc"
)

// scriptStream is a Process stream whose requests come from a script and whose answers are kept.
type scriptStream struct {
	grpc.ServerStream
	reqs []*extproc.ProcessingRequest
	out  []*extproc.ProcessingResponse
}

func (s *scriptStream) Context() context.Context { return context.Background() }

func (s *scriptStream) Recv() (*extproc.ProcessingRequest, error) {
	if len(s.reqs) == 0 {
		return nil, io.EOF
	}
	r := s.reqs[0]
	s.reqs = s.reqs[1:]
	return r, nil
}

func (s *scriptStream) Send(r *extproc.ProcessingResponse) error {
	s.out = append(s.out, r)
	return nil
}

var fuzzModes = []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_BUFFERED,
	filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_BUFFERED_PARTIAL}

var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/chat/completions?x=1"}

// script turns fuzz bytes into the messages a gateway sends: each op byte picks a message kind and its
// flags; request body chunks are cut from body in order.
func script(ops, body []byte) []*extproc.ProcessingRequest {
	var reqs []*extproc.ProcessingRequest
	for i := 0; i < len(ops) && len(reqs) < 32; i++ {
		op := ops[i]
		eos := op&0x10 != 0
		switch op & 0x7 {
		case 0:
			mode := fuzzModes[int(op>>5)%len(fuzzModes)]
			reqs = append(reqs, &extproc.ProcessingRequest{
				ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: mode},
				Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{EndOfStream: eos,
					Headers: hdrs(":method", "POST", ":path", fuzzPaths[int(op>>3)%len(fuzzPaths)], "content-type", "application/json")}}})
		case 1:
			n := len(body)
			if op&0x20 != 0 {
				n = min(n, int(op>>6)*7+1)
			}
			chunk := body[:n]
			body = body[n:]
			reqs = append(reqs, &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{
				RequestBody: &extproc.HttpBody{Body: chunk, EndOfStream: eos || len(body) == 0}}})
		case 2:
			reqs = append(reqs, &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestTrailers{RequestTrailers: &extproc.HttpTrailers{}}})
		case 3:
			st := []string{"200", "500", "429", "x"}[int(op>>5)%4]
			reqs = append(reqs, &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extproc.HttpHeaders{EndOfStream: eos, Headers: hdrs(":status", st)}}})
		case 4:
			reqs = append(reqs, &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseBody{
				ResponseBody: &extproc.HttpBody{Body: []byte("data: {\"x\":1}\n\ndata: [DONE]\n\n")[:int(op>>5)*4], EndOfStream: eos}}})
		case 5:
			reqs = append(reqs, &extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extproc.HttpTrailers{}}})
		}
	}
	return reqs
}

// FuzzProcess plays arbitrary gateway message sequences (headers, body chunks in every body mode,
// trailers, response phases, in any order and repeated) against the picker on a real router and
// simulated workers: Process always returns, every immediate answer is an OpenAI error with a 4xx or
// the router's 503/429/529, and when the stream is over no request is left booked on a worker and no
// body bytes are left charged to the budget.
func FuzzProcess(f *testing.F) {
	cfg := DefaultConfig()
	cfg.Fallbacks, cfg.MaxBodyBytes = 1, 1<<10
	rg := startRig(f, 2, cfg)
	chat := []byte(`{"model":"Qwen3-VL-2B-Instruct","messages":[{"role":"user","content":"the router keeps the cache warm"}],"max_tokens":4}`)
	completion := []byte(`{"model":"Qwen3-VL-2B-Instruct","prompt":"hello there","max_tokens":2,"stream":true}`)
	f.Add([]byte{0x00, 0x11, 0x03, 0x14, 0x05}, chat)                        // buffered: headers, body, response
	f.Add([]byte{0x20, 0x21, 0x21, 0x31, 0x03, 0x84, 0x14}, chat)            // full duplex in chunks
	f.Add([]byte{0x48, 0x21, 0x11, 0x03, 0x84, 0x05}, completion)            // streamed, completions
	f.Add([]byte{0x00, 0x11, 0x11, 0x03, 0x14}, chat)                        // body after its end
	f.Add([]byte{0x00, 0x11, 0x00, 0x11, 0x13}, chat)                        // a second request on the stream
	f.Add([]byte{0x10, 0x01, 0x02, 0x13}, chat)                              // headers with end of stream
	f.Add([]byte{0x18, 0x11}, chat)                                          // not a generate path
	f.Add([]byte{0x00, 0x11, 0x13}, []byte(`{"model":"nope","prompt":"x"}`)) // unknown model
	f.Add([]byte{0x00, 0x11}, []byte(`{`))
	f.Fuzz(func(t *testing.T, ops, body []byte) {
		st := &scriptStream{reqs: script(ops, body)}
		// A message out of protocol order ends the stream with an error, as gRPC reports it; the
		// checks below hold either way.
		_ = rg.srv.Process(st)
		for _, r := range st.out {
			im := r.GetImmediateResponse()
			if im == nil {
				continue
			}
			code := int(im.GetStatus().GetCode())
			if !slices.Contains([]int{400, 404, 413, 422, 429, 503, 529}, code) {
				t.Fatalf("immediate %d: %s", code, im.GetBody())
			}
			var e struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Message == "" || e.Error.Code != code {
				t.Fatalf("immediate %d is not an OpenAI error: %s", code, im.GetBody())
			}
		}
		if n := rg.router.ActiveRequests(); n != 0 {
			t.Fatalf("ops %x: %d requests still booked after the stream ended", ops, n)
		}
		if st := rg.srv.Stats(); st.BodyBytes != 0 || st.Streams != 0 {
			t.Fatalf("ops %x: %d body bytes still held, %d streams counted open after the stream ended", ops, st.BodyBytes, st.Streams)
		}
	})
}
