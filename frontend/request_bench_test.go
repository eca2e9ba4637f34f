package frontend

import (
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"
)

// prepareInline is the alternative the request actor is measured against: the same stages run on the
// caller's goroutine with a recover, no mailbox, no messages (it has no way to stop on a client that
// leaves, and joins the image stage by blocking).
func (a *OpenAIAPI) prepareInline(j *job) (out prepared) {
	defer func() {
		if r := recover(); r != nil {
			out = prepared{err: fmt.Errorf("internal error while preparing the request: %v", r)}
		}
	}()
	if err := a.screenMedia(j); err != nil {
		return prepared{err: err}
	}
	tokens, err := a.tokenize(j)
	if err != nil {
		return prepared{err: err}
	}
	rr := a.routeRequest(j, tokens, imageView{})
	res, pre, err := a.route(j, rr)
	if err != nil {
		return prepared{err: mapRouteErr(err)}
	}
	return prepared{req: rr, route: res, prefill: pre}
}

// BenchmarkRequestActor: one op prepares one request (a 16-token token-id completion: no template, no
// images, so the stages are the tokens, the hashes and the routing decision over 4 workers) and frees
// its route. actor: through a reused request actor (Send, the actor's Receive, the reply channel, the
// context watch registered and stopped); inline: the same stages on the calling goroutine with a
// recover. The difference is what the actor costs per request.
func BenchmarkRequestActor(b *testing.B) {
	st := startBenchStack(b, 4)
	a := st.api
	body := []byte(fmt.Sprintf(`{"model":%q,"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"max_tokens":1}`, st.name))
	for _, mode := range []string{"inline", "actor"} {
		b.Run(mode, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetBody(body)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				j, err := a.parse(&ctx.Request.Header, body, epCompletion, "")
				if err != nil {
					b.Fatal(err)
				}
				var p prepared
				if mode == "actor" {
					p = a.runRequestActor(j)
				} else {
					p = a.prepareInline(j)
				}
				if p.err != nil {
					b.Fatal(p.err)
				}
				_ = a.R.Free(j.id)
				j.close()
			}
		})
	}
}
