// Package testutil holds what the module's tests share: one way to wait for a condition, an HTTP
// answer held half-sent (WriteHeld) for tests of downloads in flight, and free ports for tests that must
// name them before something binds them (PortRange: below the kernel's ephemeral range, where nothing
// else of the test run takes them meanwhile).
//
// # Overview
//
// Tests never sleep to let something happen; they poll a condition with a deadline (Eventually, Within,
// Until). The poll interval starts at 1 ms and doubles to 20 ms, so a condition that holds at once costs
// a millisecond and a slow one does not spin two shared cores.
//
// # Concurrency model
//
// The helpers run on the test's goroutine and call cond there; cond reads shared state through whatever
// the code under test publishes (atomics, snapshots, locked getters).
//
// # Ownership
//
// Nothing is retained between calls. WriteHeld runs on the test server's handler goroutine and returns
// once the body is written or the client has gone.
//
// # Data flow
//
//	test ─▶ Eventually(cond) ─▶ cond() until true or the deadline ─▶ t.Fatalf with what was awaited
//
// The package sits on the lowest layer and imports only the standard library, so any package's tests may
// use it.
package testutil
