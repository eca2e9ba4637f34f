// Package routine is the one way the module starts a goroutine that outlives the call starting it: named,
// counted, labelled for pprof, and owned by a Group that refuses new goroutines after shutdown and waits
// for the ones it started (nats-server's startGoRoutine is the model).
//
// # Overview
//
// A Kind names one sort of goroutine ("kvevents.subscriber", "transfer.agent-accept") and counts how
// many of it run and how many were ever started. Kinds are made once, in a package-level var beside the
// code that starts them (Named), so starting one costs two atomic adds and no lookup. Kind.Go starts a
// goroutine counted under the kind with the pprof label goroutine=<name>, so a goroutine profile groups
// by it. A Group ties goroutines to their owner's lifetime: Group.Go refuses once Stop was called, and
// Wait returns when every goroutine it started has returned. Every is the body of a periodic
// goroutine: a call on each tick until a stop channel (or a context's Done) closes.
//
// The counts are visible on /debug/goroutines (frontend, admin plane) and on /metrics as
// kvroute_goroutines{name} and kvroute_goroutines_started_total{name} (Collector).
//
// # Concurrency model
//
// Counters are atomics; the table of kinds is guarded by a mutex taken only by Named and Snapshot. A
// Group's mutex orders Go against Stop, so no goroutine is added to a WaitGroup being waited on.
//
// # Ownership
//
// The table of kinds is process-wide, like runtime.NumGoroutine: it holds counters only, never behaviour,
// and a Kind lives as long as the process. Groups are owned by the component that starts the goroutines
// (a server, a subscriber, a fleet) and are stopped by it.
//
// # Data flow
//
//	var xLoop = routine.Named("pkg.x-loop")       // once, beside the code
//	g.Go(xLoop, func() { ... })                   // live+1, started+1, labelled; live-1 on return
//	g.Stop(); g.Wait()                            // shutdown: refuse, then join
//	Snapshot() ─▶ /debug/goroutines, Collector() ─▶ /metrics
package routine
