package transfer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/mm"
)

// Config configures a Sender.
type Config struct {
	// Mode is shm or net; a Sender is not built for off (NewSender refuses it).
	Mode Mode
	// Processor is the model's image processor (LoadProcessor).
	Processor Processor
	// ShmDir is the segment directory (shm). Default DefaultShmDir; tests use a temporary directory.
	ShmDir string
	// JanitorTTL: segments older than this are removed by the janitor even when their owner lives.
	// Default 10 min. JanitorEvery is the janitor period. Default 1 min.
	JanitorTTL, JanitorEvery time.Duration
	// JanitorTTLOnly disables the dead-pid check: set it when frontends in different pid namespaces
	// (containers) share one /dev/shm, where another container's live pid looks dead from here.
	// Default false (one pid namespace: orphans of a crashed frontend go at its successor's start).
	JanitorTTLOnly bool
	// Agent configures the transfer agent (net). Zero fields take DefaultAgentConfig values.
	Agent AgentConfig
	// Fetch downloads an http(s) image. The frontend passes its SSRF-guarded fetcher; nil refuses
	// http(s) URLs (data: URIs are always read in memory).
	Fetch func(ctx context.Context, url string) ([]byte, error)
	// MaxDataURIBytes bounds a data: URI (0: mm.DefaultMaxDataURIBytes).
	MaxDataURIBytes int
	// Clock is the janitor's clock; nil means the wall clock.
	Clock clock.Clock
}

// Source is one image as the request carries it: its bytes when the frontend already has them
// (--frontend-decoding downloads them), else its URL.
type Source struct {
	Data []byte
	URL  string
}

// Sender prepares items for workers: preprocess, then write a segment (shm) or register a buffer (net).
// Safe for concurrent use by every request actor; Prepare holds no lock while preprocessing.
type Sender struct {
	cfg   Config
	agent *Agent // net only

	mu     sync.Mutex
	live   map[string]struct{} // shm segments not yet released, for Close
	closed bool

	group routine.Group
	stop  chan struct{}
}

// NewSender builds a sender. For shm it sweeps orphans of dead processes once at start and then every
// JanitorEvery; for net it starts the transfer agent.
func NewSender(cfg Config) (*Sender, error) {
	if cfg.Mode == ModeOff {
		return nil, fmt.Errorf("%w: NewSender with mode off", ErrDisabled)
	}
	if err := cfg.Processor.Validate(); err != nil {
		return nil, err
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = DefaultShmDir
	}
	if cfg.JanitorTTL <= 0 {
		cfg.JanitorTTL = 10 * time.Minute
	}
	if cfg.JanitorEvery <= 0 {
		cfg.JanitorEvery = time.Minute
	}
	cfg.Clock = clock.Or(cfg.Clock)
	s := &Sender{cfg: cfg, live: map[string]struct{}{}, stop: make(chan struct{})}
	switch cfg.Mode {
	case ModeShm:
		if _, err := s.Sweep(); err != nil {
			return nil, err
		}
		s.group.Go(shmJanitor, s.janitorLoop)
	case ModeNet:
		a, err := NewAgent(cfg.Agent)
		if err != nil {
			return nil, err
		}
		s.agent = a
	}
	return s, nil
}

// shmJanitor sweeps stale shared-memory segments; Close joins it.
var shmJanitor = routine.Named("transfer.shm-janitor")

// Mode is the sender's mode.
func (s *Sender) Mode() Mode { return s.cfg.Mode }

// Agent is the transfer agent (net mode), nil otherwise.
func (s *Sender) Agent() *Agent { return s.agent }

// Prepare fetches (when src has no bytes), decodes and preprocesses one image and hands it over: a
// new segment (shm) or a registered buffer (net). release must be called once the worker's response
// has ended (or the request failed); it is idempotent and safe from any goroutine. On error nothing is
// left behind and the caller forwards the part without mm_kwargs (the worker uses the URL).
func (s *Sender) Prepare(ctx context.Context, src Source, h mm.Hash) (Descriptor, func(), error) {
	data := src.Data
	if data == nil {
		var err error
		if data, err = s.fetch(ctx, src.URL); err != nil {
			return Descriptor{}, nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Descriptor{}, nil, err
	}
	t, err := s.cfg.Processor.Preprocess(data, h)
	if err != nil {
		return Descriptor{}, nil, err
	}
	return s.PrepareTensor(ctx, &t)
}

// PrepareTensor hands over an already preprocessed tensor (benchmarks, or a processor outside this
// package).
func (s *Sender) PrepareTensor(ctx context.Context, t *Tensor) (Descriptor, func(), error) {
	if err := ctx.Err(); err != nil {
		return Descriptor{}, nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Descriptor{}, nil, ErrClosed
	}
	switch s.cfg.Mode {
	case ModeShm:
		name, sum, err := writeShm(s.cfg.ShmDir, t)
		if err != nil {
			return Descriptor{}, nil, err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			unlinkShm(s.cfg.ShmDir, name)
			return Descriptor{}, nil, ErrClosed
		}
		s.live[name] = struct{}{}
		s.mu.Unlock()
		d := newDescriptor(KindShm, t, sum)
		d.Name = name
		var once sync.Once
		return d, func() { once.Do(func() { s.unlink(name) }) }, nil
	case ModeNet:
		var sum uint64
		id, token, gen, err := s.agent.Register(t.EncodedLen(), func(b []byte) { sum = t.EncodeTo(b) })
		if err != nil {
			return Descriptor{}, nil, err
		}
		d := newDescriptor(KindNet, t, sum)
		d.Addr, d.Buffer, d.Token = s.agent.Addr(), id, token
		var once sync.Once
		return d, func() { once.Do(func() { s.agent.Release(id, gen) }) }, nil
	}
	return Descriptor{}, nil, ErrDisabled
}

func (s *Sender) unlink(name string) {
	unlinkShm(s.cfg.ShmDir, name)
	s.mu.Lock()
	delete(s.live, name)
	s.mu.Unlock()
}

func (s *Sender) fetch(ctx context.Context, url string) ([]byte, error) {
	if strings.HasPrefix(url, "data:") {
		d, err := mm.ParseDataURI(url, s.cfg.MaxDataURIBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrDecode, err)
		}
		return d.Data, nil
	}
	if s.cfg.Fetch == nil {
		return nil, fmt.Errorf("%w: no fetcher for %s", ErrDecode, mm.RedactDataURI(url))
	}
	b, err := s.cfg.Fetch(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return b, nil
}

// Sweep runs the shm janitor once over the sender's directory.
func (s *Sender) Sweep() (int, error) {
	jc := JanitorConfig{Dir: s.cfg.ShmDir, TTL: s.cfg.JanitorTTL, Clock: s.cfg.Clock}
	if s.cfg.JanitorTTLOnly {
		jc.Alive = func(int) bool { return true }
	}
	return SweepShm(jc)
}

func (s *Sender) janitorLoop() {
	routine.Every(s.stop, s.cfg.JanitorEvery, func() { _, _ = s.Sweep() })
}

// Live is the number of items handed over and not yet released (segments, or agent buffers in use).
func (s *Sender) Live() int {
	if s.agent != nil {
		return s.agent.Stats().InUse
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Close refuses new items, unlinks every live segment / frees every buffer, and stops the goroutines.
func (s *Sender) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	names := make([]string, 0, len(s.live))
	for n := range s.live {
		names = append(names, n)
	}
	s.live = map[string]struct{}{}
	s.mu.Unlock()
	for _, n := range names {
		unlinkShm(s.cfg.ShmDir, n)
	}
	s.group.Wait()
	if s.agent != nil {
		return s.agent.Close()
	}
	return nil
}
