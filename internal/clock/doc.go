// Package clock is the module's one source of time: every component with a TTL, a timeout, an expiry or a
// simulated duration takes a Clock, so its tests run on a Fake and never sleep.
//
// # Overview
//
// Clock reads the time and makes timers. Wall is the system clock and the default wherever a Clock is
// left nil (Or). Fake is a manual clock for tests: its time moves only when the test sets or advances it,
// and its timers fire only then.
//
// # Concurrency model
//
// Wall is stateless. Fake is safe for concurrent use: one mutex guards its time and its timers, and a
// timer's channel has room for one tick, so firing never blocks.
//
// # Ownership
//
// A Clock is created by cmd/ (Wall, implicitly) or by a test (Fake) and passed down in a component's
// Config; no package keeps a clock of its own in a global.
//
// # Data flow
//
//	cmd or test ─▶ Config.Clock ─▶ component: Now() stamps and expiries, NewTimer() paced waits
//	test ─▶ Fake.Advance(d) ─▶ Now moves, due timers fire in time order
//
// The package sits on the lowest layer and imports only the standard library, so any package may use it.
package clock
