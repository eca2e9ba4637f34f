package routine

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func countOf(name string) Count {
	for _, c := range Snapshot() {
		if c.Name == name {
			return c
		}
	}
	return Count{}
}

// A Group's goroutines are counted while they run, labelled for pprof, joined by Wait, and refused after Stop.
func TestGroupCountsLabelsAndRefuses(t *testing.T) {
	k := Named("routine-test.worker")
	if Named("routine-test.worker") != k {
		t.Fatal("Named made a second kind for one name")
	}
	before := countOf(k.Name())
	var g Group
	release, running := make(chan struct{}), make(chan struct{}, 3)
	for i := 0; i < 3; i++ {
		if !g.Go(k, func() { running <- struct{}{}; <-release }) {
			t.Fatal("a fresh group refused")
		}
	}
	for i := 0; i < 3; i++ {
		<-running
	}
	if c := countOf(k.Name()); c.Live != before.Live+3 {
		t.Fatalf("%+v, want 3 live", c)
	}
	var prof bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&prof, 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prof.String(), `"goroutine":"routine-test.worker"`) {
		t.Fatal("the goroutine profile has no goroutine=routine-test.worker label")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var live float64 = -1
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "kvroute_goroutines" && m.GetLabel()[0].GetValue() == k.Name() {
				live = m.GetGauge().GetValue()
			}
		}
	}
	if live != float64(before.Live+3) {
		t.Fatalf("kvroute_goroutines{name=%q} = %v, want 3", k.Name(), live)
	}
	g.Stop()
	if g.Go(k, func() {}) {
		t.Fatal("a stopped group started a goroutine")
	}
	close(release)
	g.Wait()
	if c := countOf(k.Name()); c.Live != before.Live || c.Started != before.Started+3 {
		t.Fatalf("after Wait: %+v, want %d live, %d started", c, before.Live, before.Started+3)
	}
}

// TestEvery: fn runs on each tick until done is closed, and Every returns then.
func TestEvery(t *testing.T) {
	done := make(chan struct{})
	ticks := make(chan struct{}, 1)
	var calls atomic.Int64
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		Every(done, time.Millisecond, func() {
			calls.Add(1)
			select {
			case ticks <- struct{}{}:
			default:
			}
		})
	}()
	for range 3 {
		<-ticks
	}
	close(done)
	<-returned
	if n := calls.Load(); n < 3 {
		t.Fatalf("%d calls, want at least 3", n)
	}
}
