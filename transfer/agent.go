package transfer

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/netlimit"
	"github.com/kvroute/kvroute/internal/routine"
)

// AgentConfig configures the network transfer agent.
type AgentConfig struct {
	// ListenAddr is the TCP address to listen on. Default "127.0.0.1:0"; cross-node use needs a routable
	// address (e.g. ":7701").
	ListenAddr string
	// AdvertiseAddr is the host:port written into descriptors. Default: the listener's address (wrong
	// for a wildcard listen address; set it then).
	AdvertiseAddr string
	// Buffers is the number of registered buffers: the most items in flight at once. Default 16
	// (Dynamo's pool); when all are taken Register fails with ErrExhausted and the request falls back.
	Buffers int
	// BufferSize is each pre-allocated buffer's size in bytes. Default 8 MiB. A larger item takes a slot
	// with a dedicated allocation that is dropped at release (Dynamo's "dynamic descriptor").
	BufferSize int
	// MaxItemBytes bounds one item, so the pool's memory is at most Buffers × MaxItemBytes. Default
	// 64 MiB (a 1920×1080 Qwen3-VL image is 50 MB); a larger item is refused with ErrExhausted and
	// its request falls back to the URL.
	MaxItemBytes int
	// TTL releases a buffer whose worker never acknowledged: Dynamo's DYN_MM_NIXL_CLEANUP_TIMEOUT_S.
	// Default 60 s.
	TTL time.Duration
	// SweepEvery is how often the background sweep runs (wall-clock ticker). Default TTL/4, so a buffer
	// outlives its TTL by at most a quarter. Tests set it long and call Sweep with a fake clock.
	SweepEvery time.Duration
	// IOTimeout bounds one pull (request read, payload write, ack read). Default 30 s.
	IOTimeout time.Duration
	// MaxConns bounds the connections open at once; one past it is closed at once (its puller falls
	// back to the URL). A pull is one connection and there are at most Buffers items to pull, so the
	// bound is for peers that connect and say nothing, each held for IOTimeout. Default 4 × Buffers, at
	// least 64.
	MaxConns int
	// Clock is the clock of the TTL; nil means the wall clock.
	Clock clock.Clock
}

// DefaultAgentConfig returns the defaults above.
func DefaultAgentConfig() AgentConfig {
	return AgentConfig{ListenAddr: "127.0.0.1:0", Buffers: 16, BufferSize: 8 << 20, MaxItemBytes: 64 << 20, TTL: 60 * time.Second,
		IOTimeout: 30 * time.Second}
}

// Validate reports the first invalid field.
func (c AgentConfig) Validate() error {
	if c.Buffers <= 0 || c.BufferSize <= 0 || c.MaxItemBytes < c.BufferSize || c.TTL <= 0 || c.IOTimeout <= 0 {
		return fmt.Errorf("%w: agent buffers %d size %d max item %d ttl %v io timeout %v", ErrConfig, c.Buffers, c.BufferSize, c.MaxItemBytes, c.TTL, c.IOTimeout)
	}
	return nil
}

const tokenLen = 16

// Pull protocol, one item per TCP connection:
//
//	worker → agent: "KVRP" | version u8 (1) | buffer u32 LE | token [16]byte
//	agent → worker: status u8 (0 ok, 1 refused) | length u64 LE | item bytes (length)
//	worker → agent: ack u8 (0x06) after verifying the checksum
//
// The token is consumed by the first pull whatever its outcome, so a replayed or guessed descriptor
// is refused; the buffer is released on the ack, on the sender's release, or after the TTL.
var pullMagic = [4]byte{'K', 'V', 'R', 'P'}

const (
	pullVersion   = 1
	pullReqLen    = 4 + 1 + 4 + tokenLen
	statusOK      = 0
	statusRefused = 1
	ackByte       = 0x06
)

type slotState uint8

const (
	slotFree    slotState = iota
	slotReady             // registered, token unused
	slotServing           // token consumed, payload being written
	slotDone              // served, waiting for ack / release / TTL
)

type slot struct {
	state   slotState
	gen     uint64 // bumped at each registration: a stale release cannot free a reused slot
	token   [tokenLen]byte
	buf     []byte // the pre-registered buffer
	item    []byte // the registered bytes: buf[:n] or a dedicated allocation
	expires time.Time
	release bool // released while serving: free when the write ends
}

// AgentStats are cumulative counters and the current pool occupancy.
type AgentStats struct {
	Registered, Served, Acked, Refused, Expired, Released, Exhausted uint64
	InUse                                                            int
	// ConnsRefused counts connections closed at once because MaxConns were open; AcceptErrors, failed
	// accepts (each retried after a pause).
	ConnsRefused, AcceptErrors int64
}

// Agent is the frontend's network transfer agent: a bounded pool of buffers served over TCP to holders
// of a one-time token. Safe for concurrent use; all slot state is under mu.
type Agent struct {
	cfg AgentConfig
	ln  net.Listener

	mu     sync.Mutex
	slots  []slot
	free   []int
	closed bool
	stats  AgentStats
	conns  map[net.Conn]struct{}
	// connStats are the listener's counts.
	connStats netlimit.ConnStats

	group routine.Group
	stop  chan struct{}
}

// NewAgent validates cfg (zero fields take defaults), listens and starts serving.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	def := DefaultAgentConfig()
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = def.ListenAddr
	}
	if cfg.Buffers == 0 {
		cfg.Buffers = def.Buffers
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = def.BufferSize
	}
	if cfg.MaxItemBytes == 0 {
		cfg.MaxItemBytes = max(def.MaxItemBytes, cfg.BufferSize)
	}
	if cfg.TTL == 0 {
		cfg.TTL = def.TTL
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = cfg.TTL / 4
	}
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = def.IOTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = max(4*cfg.Buffers, 64)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transfer: agent listen: %w", err)
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = ln.Addr().String()
	}
	a := &Agent{cfg: cfg, slots: make([]slot, cfg.Buffers), conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	// Bounded, and accepting through errors that pass: a full descriptor table ended the accept loop
	// for good.
	a.ln = netlimit.NewListener(ln, netlimit.ListenerConfig{MaxConns: cfg.MaxConns, Stats: &a.connStats})
	for i := range a.slots {
		// Buffers are allocated lazily on first use so an idle agent costs nothing; once allocated they
		// are reused for the agent's life (the "registered" pool).
		a.free = append(a.free, cfg.Buffers-1-i)
	}
	a.group.Go(agentAccept, a.acceptLoop)
	a.group.Go(agentSweep, a.sweepLoop)
	return a, nil
}

// The agent's goroutines, all in its group (Close stops it and joins them): the accept and sweep loops,
// and one per pull being served.
var (
	agentAccept = routine.Named("transfer.agent-accept")
	agentSweep  = routine.Named("transfer.agent-sweep")
	agentPull   = routine.Named("transfer.agent-pull")
)

// Addr is the advertised address.
func (a *Agent) Addr() string { return a.cfg.AdvertiseAddr }

// Register takes a free buffer, lets fill write n bytes into it, and returns the buffer id and the
// one-time token (hex). The bytes are visible to a pull only after fill returns.
func (a *Agent) Register(n int, fill func(b []byte)) (id uint32, token string, gen uint64, err error) {
	if n > a.cfg.MaxItemBytes {
		return 0, "", 0, fmt.Errorf("%w: item of %d bytes exceeds %d", ErrExhausted, n, a.cfg.MaxItemBytes)
	}
	var tok [tokenLen]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return 0, "", 0, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return 0, "", 0, ErrClosed
	}
	if len(a.free) == 0 {
		a.stats.Exhausted++
		a.mu.Unlock()
		return 0, "", 0, ErrExhausted
	}
	i := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	s := &a.slots[i]
	s.gen++
	gen = s.gen
	s.state = slotServing // reserved: invisible to pulls, untouched by others, while filling
	buf := s.buf
	a.mu.Unlock()

	// Allocation and copy happen outside the lock: zeroing and copying megabytes must not stall other
	// registrations or pulls.
	var item []byte
	if n <= a.cfg.BufferSize {
		if buf == nil {
			buf = make([]byte, a.cfg.BufferSize)
		}
		item = buf[:n]
	} else {
		item = make([]byte, n)
	}
	fill(item)

	a.mu.Lock()
	defer a.mu.Unlock()
	s = &a.slots[i]
	if n <= a.cfg.BufferSize {
		s.buf = buf
	}
	s.item = item
	if s.release || a.closed {
		a.freeLocked(i)
		return 0, "", 0, ErrClosed
	}
	s.token = tok
	s.state = slotReady
	s.expires = a.cfg.Clock.Now().Add(a.cfg.TTL)
	a.stats.Registered++
	return uint32(i), hex.EncodeToString(tok[:]), gen, nil
}

// Release frees buffer id of generation gen (the sender's release after the response ended). A
// buffer being written to a worker is freed when the write ends. Releasing twice is harmless.
func (a *Agent) Release(id uint32, gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if int(id) >= len(a.slots) || a.slots[id].gen != gen || a.slots[id].state == slotFree {
		return
	}
	a.stats.Released++
	if a.slots[id].state == slotServing {
		a.slots[id].release = true
		return
	}
	a.freeLocked(int(id))
}

func (a *Agent) freeLocked(i int) {
	s := &a.slots[i]
	if s.state == slotFree {
		return
	}
	s.state, s.release, s.token, s.item = slotFree, false, [tokenLen]byte{}, nil
	a.free = append(a.free, i)
}

// Sweep releases every buffer past its TTL and returns how many. The background loop calls it; tests
// call it after advancing their clock.
func (a *Agent) Sweep() int {
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for i := range a.slots {
		s := &a.slots[i]
		if (s.state == slotReady || s.state == slotDone) && now.After(s.expires) {
			a.freeLocked(i)
			a.stats.Expired++
			n++
		}
	}
	return n
}

// Stats returns the counters and the number of buffers in use.
func (a *Agent) Stats() AgentStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.stats
	st.InUse = len(a.slots) - len(a.free)
	st.ConnsRefused, st.AcceptErrors = a.connStats.Refused(), a.connStats.AcceptErrors()
	return st
}

// Close stops accepting, closes open pulls, frees every buffer and waits for the goroutines.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.group.Stop()
	close(a.stop)
	for c := range a.conns {
		_ = c.Close()
	}
	a.mu.Unlock()
	err := a.ln.Close()
	a.group.Wait()
	a.mu.Lock()
	for i := range a.slots {
		a.slots[i].release = false
		a.freeLocked(i)
	}
	a.mu.Unlock()
	return err
}

func (a *Agent) sweepLoop() {
	routine.Every(a.stop, a.cfg.SweepEvery, func() { a.Sweep() })
}

func (a *Agent) acceptLoop() {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			_ = c.Close()
			return
		}
		a.conns[c] = struct{}{}
		a.group.Go(agentPull, func() { // closed is false under mu, so the group is not stopped
			a.serve(c)
			a.mu.Lock()
			delete(a.conns, c)
			a.mu.Unlock()
			_ = c.Close()
		})
		a.mu.Unlock()
	}
}

// serve answers one pull.
func (a *Agent) serve(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(a.cfg.IOTimeout))
	var req [pullReqLen]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	id := binary.LittleEndian.Uint32(req[5:])
	var tok [tokenLen]byte
	copy(tok[:], req[9:])

	a.mu.Lock()
	ok := [4]byte(req[0:4]) == pullMagic && req[4] == pullVersion && int(id) < len(a.slots)
	var item []byte
	var gen uint64
	if ok {
		s := &a.slots[id]
		ok = s.state == slotReady && subtle.ConstantTimeCompare(s.token[:], tok[:]) == 1
		if ok {
			s.state, item, gen = slotServing, s.item, s.gen
			s.token = [tokenLen]byte{} // one-time
		}
	}
	if !ok {
		a.stats.Refused++
	}
	a.mu.Unlock()
	if !ok {
		_, _ = c.Write([]byte{statusRefused, 0, 0, 0, 0, 0, 0, 0, 0})
		return
	}

	var hdr [9]byte
	hdr[0] = statusOK
	binary.LittleEndian.PutUint64(hdr[1:], uint64(len(item)))
	_, err := c.Write(hdr[:])
	if err == nil {
		_, err = c.Write(item)
	}
	a.mu.Lock()
	s := &a.slots[id]
	if s.gen == gen {
		a.stats.Served++
		s.state = slotDone
		if s.release || err != nil {
			// Released meanwhile, or the worker is gone: nobody can use this buffer any more.
			a.freeLocked(int(id))
		}
	}
	a.mu.Unlock()
	if err != nil {
		return
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != ackByte {
		return // unacknowledged: freed by the sender's release or the TTL
	}
	a.mu.Lock()
	if s := &a.slots[id]; s.gen == gen && s.state == slotDone {
		a.stats.Acked++
		a.freeLocked(int(id))
	}
	a.mu.Unlock()
}
