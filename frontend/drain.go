package frontend

import (
	"context"
	"log/slog"
	"time"
)

// DrainConfig bounds a graceful shutdown, as Dynamo's: readiness goes at once, then a grace period in
// which requests in flight finish and new ones are still served, then a bounded drain with the listener
// closed, then whatever is left is cancelled.
type DrainConfig struct {
	// GracePeriod is how long requests in flight may finish while the server still accepts
	// (DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS). It ends early when nothing is in flight. Default 5s;
	// negative: no grace.
	GracePeriod time.Duration
	// Timeout bounds the drain after the listener closes (DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS);
	// requests still running then are cancelled (streams end with an error event). Default 5s.
	Timeout time.Duration
	// Poll is how often the grace period checks the in-flight count. Default 20ms.
	Poll time.Duration
}

// DefaultDrainConfig returns Dynamo's defaults.
func DefaultDrainConfig() DrainConfig {
	return DrainConfig{GracePeriod: 5 * time.Second, Timeout: 5 * time.Second, Poll: 20 * time.Millisecond}
}

// InFlighter is what a drain waits on and finally cancels: an OpenAIAPI, or Models (all of them).
type InFlighter interface {
	InFlight() int64
	CancelInFlight()
}

// GraceWait is a drain's grace period: it returns once open() reports nothing open, checked every poll,
// or when grace has passed (at once when grace is not positive).
func GraceWait(open func() int64, grace, poll time.Duration) {
	if grace <= 0 {
		return
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for open() > 0 {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// Drain shuts srv down within cfg.GracePeriod + cfg.Timeout (plus a second for cancelled streams to
// close): probes say not ready, in-flight requests get the grace period, the listener closes, the rest
// get the timeout, then are cancelled. probes and api may be nil.
func Drain(srv *Server, api InFlighter, probes *Probes, cfg DrainConfig, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	start := time.Now()
	if probes != nil {
		probes.StartDrain()
	}
	inflight := func() int64 {
		if api == nil {
			return 0
		}
		return api.InFlight()
	}
	log.Info("shutdown: draining", "in_flight", inflight(), "grace_period", cfg.GracePeriod, "timeout", cfg.Timeout)
	GraceWait(inflight, cfg.GracePeriod, cfg.Poll)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	err := srv.srv.ShutdownWithContext(ctx)
	cancel()
	if err != nil && api != nil {
		n := inflight()
		api.CancelInFlight()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.srv.ShutdownWithContext(ctx)
		cancel()
		log.Warn("shutdown: drain timeout, requests cancelled", "cancelled", n)
	}
	log.Info("shutdown: drained", "took", time.Since(start).Round(time.Millisecond))
}
