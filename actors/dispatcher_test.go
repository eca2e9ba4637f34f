package actors

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// worker blocks on a channel message and counts int messages.
type worker struct{ done *sync.WaitGroup }

func (w *worker) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case chan struct{}:
		<-m
	case int:
		w.done.Done()
	}
}

func TestReuseDispatcher(t *testing.T) {
	system := NewSystem(nil)
	defer system.Shutdown()
	d := NewReuseDispatcher(10, 100*time.Millisecond)
	var done sync.WaitGroup
	props := actor.PropsFromProducer(func() actor.Actor { return &worker{done: &done} }, actor.WithDispatcher(d))

	// A mailbox that blocks must not starve the others.
	block := make(chan struct{})
	system.Root.Send(system.Root.Spawn(props), block)
	for round := 0; round < 3; round++ {
		done.Add(100)
		for i := 0; i < 100; i++ {
			system.Root.Send(system.Root.Spawn(props), i)
		}
		finished := make(chan struct{})
		go func() { done.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: messages not processed while one mailbox blocks", round)
		}
	}
	close(block)
	// Idle goroutines leave after the idle timeout.
	deadline := time.Now().Add(5 * time.Second)
	for d.Live() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pooled goroutines still alive", d.Live())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
