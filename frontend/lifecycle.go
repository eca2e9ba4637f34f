package frontend

import (
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"
)

// A request's lifecycle at the edge, in one place: begin when its job exists, firstToken when the
// first byte of the answer is known, end exactly once. Metrics, the in-flight count the drain waits
// on, and the access-log line all come from these three calls.

// begin counts j in flight; its context derives from the API's drain context.
func (a *OpenAIAPI) begin(j *job) {
	a.live.Add(1)
	if a.Metrics != nil {
		a.Metrics.inflight.Inc()
		a.Metrics.queued.Inc()
	}
}

// firstToken records the time to first token once.
func (a *OpenAIAPI) firstToken(j *job) {
	if j.firstAt != 0 {
		return
	}
	j.firstAt = time.Since(j.started)
	if a.Metrics != nil {
		a.Metrics.queued.Dec()
		a.Metrics.ttft.Observe(j.firstAt.Seconds())
		a.Metrics.rTTFT.Observe(j.firstAt.Seconds())
	}
}

// end finishes j with the HTTP status the client got: context and resources, metrics, the access log.
func (a *OpenAIAPI) end(j *job, status int) {
	j.close()
	d := time.Since(j.started)
	if a.Metrics != nil {
		if j.firstAt == 0 {
			a.Metrics.queued.Dec()
		}
		a.Metrics.inflight.Dec()
		a.Metrics.requests(j.ep, j.stream, status)
		a.Metrics.duration.Observe(d.Seconds())
		if j.routed {
			a.Metrics.rReqs.Inc()
			var itl time.Duration
			if j.chunks > 1 {
				itl = (d - j.firstAt) / time.Duration(j.chunks-1)
			}
			a.Metrics.lastRequest(j.route.Worker.WorkerID, j.route.Worker.DPRank, j.firstAt, j.promptTokens, itl)
		}
	}
	a.live.Add(-1)
	j.trace.end(j, status, d)
	if a.AccessLog != nil {
		worker := int64(-1) // not routed (0 is a worker's id)
		if j.routed {
			worker = int64(j.route.Worker.WorkerID)
		}
		a.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("request_id", j.reqID), slog.String("endpoint", j.ep.path()), slog.Bool("stream", j.stream),
			slog.Int("status", status), slog.Int64("worker", worker),
			slog.Int("dp_rank", int(j.route.Worker.DPRank)), slog.Int("overlap_blocks", int(j.route.OverlapBlocks)),
			slog.Float64("ttft_ms", float64(j.firstAt.Microseconds())/1000), slog.Float64("duration_ms", float64(d.Microseconds())/1000))
	}
}

// failEarly logs a request refused before it had a job (bad body, wrong method).
func (a *OpenAIAPI) failEarly(ctx *fasthttp.RequestCtx, ep endpoint, reqID string, status int) {
	if a.Metrics != nil {
		a.Metrics.requests(ep, false, status)
	}
	if a.AccessLog != nil {
		a.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("request_id", reqID), slog.String("endpoint", ep.path()), slog.Int("status", status))
	}
}

// InFlight is the number of OpenAI requests begun and not yet ended (streams included).
func (a *OpenAIAPI) InFlight() int64 { return a.live.Load() }

// CancelInFlight cancels every request in flight: streams end, upstream calls are aborted. The drain's
// last step, once its deadline has passed.
func (a *OpenAIAPI) CancelInFlight() { a.cancelAll() }

// maxRequestIDLen bounds a client's X-Request-Id; longer or non-printable ids are replaced.
const maxRequestIDLen = 128

// clientRequestID returns the client's X-Request-Id when it is a usable id, else "".
func clientRequestID(ctx *fasthttp.RequestCtx) string {
	v := ctx.Request.Header.Peek("X-Request-Id")
	if !usableRequestID(string(v)) {
		return ""
	}
	return string(v)
}

// usableRequestID reports whether id can travel as a header value: 1 to maxRequestIDLen printable
// ASCII characters.
func usableRequestID(id string) bool {
	if len(id) == 0 || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
