package epp

import (
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extproc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvroute/kvroute/internal/testutil"
)

// startGathering opens a stream in STREAMED mode (an answer per chunk) and sends the request headers and
// one chunk of body without its end; it returns the stream and the picker's answer to the chunk.
func (r *rig) startGathering(t *testing.T, chunk []byte) (*gateway, *extproc.ProcessingResponse) {
	t.Helper()
	g := r.open(t, false)
	g.send(&extproc.ProcessingRequest{
		ProtocolConfig: &extproc.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_STREAMED},
		Request: &extproc.ProcessingRequest_RequestHeaders{RequestHeaders: &extproc.HttpHeaders{
			Headers: hdrs(":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json")}}})
	if resp := g.recv(); resp.GetRequestHeaders() == nil {
		t.Fatalf("headers answer: %v", resp)
	}
	g.send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{Body: chunk}}})
	return g, g.recv()
}

// TestBodyBudget: the bodies being gathered over all streams stay under MaxBodyBytesInFlight: a chunk
// that would pass it is answered 503 and counted busy; a body is let go once its request is picked and
// when its stream breaks, and the budget then takes new bodies again.
func TestBodyBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes, cfg.MaxBodyBytesInFlight = 48<<10, 64<<10
	r := startRig(t, 1, cfg)
	body := chat(longText("budget", 3800), false) // over 40 KiB, under 48 KiB
	head, tail := body[:40<<10], body[40<<10:]
	if len(body) > cfg.MaxBodyBytes || len(tail) == 0 {
		t.Fatalf("body of %d bytes does not straddle the test's bounds", len(body))
	}

	a, resp := r.startGathering(t, head)
	if resp.GetRequestBody() == nil {
		t.Fatalf("first stream's chunk: %v", resp)
	}
	if got := r.srv.Stats().BodyBytes; got != int64(len(head)) {
		t.Fatalf("gathering %d bytes, want %d", got, len(head))
	}
	_, resp = r.startGathering(t, head)
	if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 503 {
		t.Fatalf("second stream past the budget: %v, want an immediate 503", resp)
	}
	if st := r.srv.Stats(); st.Busy != 1 || st.BodyBytes != int64(len(head)) {
		t.Fatalf("after the refusal: %+v, want busy 1 and the first stream's bytes", st)
	}

	// The first body completes and is picked: its bytes go back.
	a.send(&extproc.ProcessingRequest{Request: &extproc.ProcessingRequest_RequestBody{RequestBody: &extproc.HttpBody{Body: tail, EndOfStream: true}}})
	if resp := a.recv(); resp.GetRequestBody().GetResponse().GetHeaderMutation() == nil {
		t.Fatalf("first stream's pick: %v", resp)
	}
	testutil.Eventually(t, "the picked body let go", func() bool { return r.srv.Stats().BodyBytes == 0 })

	// A stream that breaks while gathering gives its bytes back too.
	c, resp := r.startGathering(t, head)
	if resp.GetRequestBody() == nil {
		t.Fatalf("third stream's chunk after the budget emptied: %v", resp)
	}
	c.cancel()
	testutil.Eventually(t, "a broken stream's body let go", func() bool { return r.srv.Stats().BodyBytes == 0 })
}

// TestStreamBound: at most MaxStreams exchanges are open at once; one past it ends with RESOURCE_EXHAUSTED
// before it sends anything, is counted refused, and a closed stream makes room for a new one.
func TestStreamBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxStreams = 2
	r := startRig(t, 1, cfg)
	chunk := []byte(`{"model":"`)
	a, resp := r.startGathering(t, chunk)
	if resp.GetRequestBody() == nil {
		t.Fatalf("first stream: %v", resp)
	}
	if _, resp = r.startGathering(t, chunk); resp.GetRequestBody() == nil {
		t.Fatalf("second stream: %v", resp)
	}
	if st := r.srv.Stats(); st.Streams != 2 || st.Refused != 0 {
		t.Fatalf("two streams gathering: %+v", st)
	}

	// The third ends at once: nothing it sends is read, and its first receive has the status.
	c := r.open(t, true)
	_, err := c.stream.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	testutil.Eventually(t, "the third stream counted refused and gone", func() bool {
		st := r.srv.Stats()
		return st.Refused == 1 && st.Streams == 2
	})

	a.cancel()
	testutil.Eventually(t, "the first stream's slot free", func() bool { return r.srv.Stats().Streams == 1 })
	if _, resp = r.startGathering(t, chunk); resp.GetRequestBody() == nil {
		t.Fatalf("a stream after one closed: %v", resp)
	}
	if st := r.srv.Stats(); st.Refused != 1 || st.Streams != 2 {
		t.Fatalf("at the end: %+v", st)
	}
}
