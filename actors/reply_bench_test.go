package actors

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// echo answers a query on the reply channel it carries, or through the context when asked by a future.
type echo struct{}

type chanQuery struct{ reply chan int }

func (echo) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *chanQuery:
		m.reply <- 1
	case int:
		ctx.Respond(m)
	}
}

// BenchmarkReplyPath is what asking an actor for an answer costs, the mailbox round trip alone (the
// actor does no work): one op is one question and its answer. path=chan sends a message carrying a
// buffered reply channel and waits on it (what the request path's shard queries once did);
// path=future is protoactor's RequestFuture and Result. Both run on protoactor's default dispatcher.
func BenchmarkReplyPath(b *testing.B) {
	for _, path := range []string{"chan", "future"} {
		b.Run("path="+path, func(b *testing.B) {
			system := NewSystem(nil)
			defer system.Shutdown()
			pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return echo{} }))
			q := &chanQuery{reply: make(chan int, 1)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if path == "chan" {
					system.Root.Send(pid, q)
					<-q.reply
					continue
				}
				if _, err := system.Root.RequestFuture(pid, 1, time.Second).Result(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
