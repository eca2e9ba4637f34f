package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/internal/testutil"
)

// TestShmTwoProcesses: a sender process writes a segment; this process reads and verifies it; after
// release the segment is gone and a second read falls back (ErrUnavailable).
func TestShmTwoProcesses(t *testing.T) {
	dir := shmTestDir(t)
	h := startHelper(t, "sender", "KVROUTE_TRANSFER_MODE=shm", "KVROUTE_TRANSFER_DIR="+dir)
	var d Descriptor
	if err := json.Unmarshal([]byte(h.call(t, "prepare 5")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindShm || !strings.Contains(d.Name, fmt.Sprintf("_%d_", h.cmd.Process.Pid)) {
		t.Fatalf("descriptor %+v does not name the sender's pid %d", d, h.cmd.Process.Pid)
	}
	r := Receiver{ShmDir: dir}
	got, err := r.Receive(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	want := testTensor(5, 64)
	if !equalF32(got.Data, want.Data) || got.Hash != want.Hash || got.GridTHW != want.GridTHW {
		t.Fatal("received tensor differs from the sent one")
	}
	if h.call(t, "release 0") != "released" {
		t.Fatal("release failed")
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("segments left after release: %v", segs)
	}
	if _, err := r.Receive(context.Background(), d); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read after release: %v, want ErrUnavailable", err)
	}
}

// TestNetTwoProcesses: this process runs the agent; a receiver process pulls over loopback; the ack
// frees the buffer; a replay of the same descriptor is refused.
func TestNetTwoProcesses(t *testing.T) {
	s, err := NewSender(Config{Mode: ModeNet, Processor: Qwen3VLProcessor(), Agent: AgentConfig{Buffers: 4, BufferSize: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tn := testTensor(9, 64)
	d, release, err := s.PrepareTensor(context.Background(), &tn)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	b, _ := json.Marshal(d)
	h := startHelper(t, "receiver")
	if got := h.call(t, string(b)); got != fmt.Sprintf("ok %016x", tn.Checksum()) {
		t.Fatalf("receiver: %q", got)
	}
	testutil.Within(t, 5*time.Second, "buffer freed by ack", func() bool { return s.Agent().Stats().InUse == 0 })
	if got := h.call(t, string(b)); got != "err pull refused" {
		t.Fatalf("replayed descriptor: %q, want refused", got)
	}
	if st := s.Agent().Stats(); st.Acked != 1 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFallbacks: every way a handoff can fail maps to a class the worker turns into the URL fallback.
func TestFallbacks(t *testing.T) {
	dir := shmTestDir(t)
	clk := clock.NewFake(time.Unix(1000, 0))
	a, err := NewAgent(AgentConfig{Buffers: 2, BufferSize: 1 << 20, Clock: clk, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tn := testTensor(1, 16)
	register := func() Descriptor { return registerNet(t, a, &tn) }
	r := Receiver{ShmDir: dir, DialTimeout: time.Second}
	ctx := context.Background()

	t.Run("segment gone", func(t *testing.T) {
		d := newDescriptor(KindShm, &tn, tn.Checksum())
		d.Name = "kvroute_mm_1_0123456789ab"
		if _, err := r.Receive(ctx, d); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("path traversal refused", func(t *testing.T) {
		d := newDescriptor(KindShm, &tn, tn.Checksum())
		d.Name = "../etc/passwd"
		if _, err := r.Receive(ctx, d); !errors.Is(err, ErrBadDescriptor) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("corrupt segment", func(t *testing.T) {
		name, sum, err := writeShm(dir, &tn)
		if err != nil {
			t.Fatal(err)
		}
		defer unlinkShm(dir, name)
		f, _ := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		_, _ = f.WriteAt([]byte{0xff, 0xff}, headerSize+100)
		f.Close()
		d := newDescriptor(KindShm, &tn, sum)
		d.Name = name
		if _, err := r.Receive(ctx, d); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		d := register()
		bad := d
		bad.Token = strings.Repeat("0", 32)
		if _, err := r.Receive(ctx, bad); !errors.Is(err, ErrRefused) {
			t.Fatalf("got %v", err)
		}
		if _, err := r.Receive(ctx, d); err != nil {
			t.Fatalf("right token after a wrong one: %v", err)
		}
		testutil.Within(t, 5*time.Second, "ack frees the buffer", func() bool { return a.Stats().InUse == 0 })
	})
	t.Run("ttl expiry", func(t *testing.T) {
		d := register()
		clk.Advance(61 * time.Second)
		if n := a.Sweep(); n != 1 {
			t.Fatalf("swept %d, want 1", n)
		}
		if _, err := r.Receive(ctx, d); !errors.Is(err, ErrRefused) {
			t.Fatalf("pull after ttl: %v", err)
		}
	})
	t.Run("pool exhausted", func(t *testing.T) {
		d1, d2 := register(), register()
		if _, _, _, err := a.Register(10, func([]byte) {}); !errors.Is(err, ErrExhausted) {
			t.Fatalf("third register: %v", err)
		}
		if _, _, _, err := a.Register(64<<20+1, func([]byte) { t.Fatal("filled an oversize item") }); !errors.Is(err, ErrExhausted) {
			t.Fatalf("oversize register: %v", err)
		}
		for _, d := range []Descriptor{d1, d2} {
			if _, err := r.Receive(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		testutil.Within(t, 5*time.Second, "acks", func() bool { return a.Stats().InUse == 0 })
	})
	t.Run("agent down", func(t *testing.T) {
		b, err := NewAgent(AgentConfig{Buffers: 1, BufferSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		d := registerNet(t, b, &tn)
		b.Close()
		if _, err := r.Receive(ctx, d); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v", err)
		}
	})
	if st := a.Stats(); st.InUse != 0 {
		t.Fatalf("buffers in use at the end: %+v", st)
	}
}

// TestJanitor: segments of a dead pid go at once; a live pid's segment only after the TTL.
func TestJanitor(t *testing.T) {
	dir := shmTestDir(t)
	for _, n := range []string{"kvroute_mm_111_0123456789ab", "kvroute_mm_222_0123456789ab", "unrelated"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	alive := func(pid int) bool { return pid == 222 }
	clk := clock.NewFake(time.Now()) // the segments' modification times are the wall clock's
	n, err := SweepShm(JanitorConfig{Dir: dir, TTL: time.Minute, Clock: clk, Alive: alive})
	if err != nil || n != 1 {
		t.Fatalf("first sweep removed %d (%v), want 1", n, err)
	}
	clk.Advance(2 * time.Minute)
	n, _ = SweepShm(JanitorConfig{Dir: dir, TTL: time.Minute, Clock: clk, Alive: alive})
	if n != 1 {
		t.Fatalf("sweep after ttl removed %d, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "unrelated")); err != nil {
		t.Fatal("janitor removed a file that is not a kvroute segment")
	}
}

// TestSoak: 1,000 requests over shm and net with 8 concurrent clients, a fifth cancelled before the
// worker reads ("killed mid-stream": release runs from the request's defer either way), a tenth whose
// worker pulls but never acknowledges; meanwhile a sender process is killed with segments live and
// restarted (its successor's start-up sweep removes them). Nothing is left: no segment, no buffer.
func TestSoak(t *testing.T) {
	dir := shmTestDir(t)
	shm, err := NewSender(Config{Mode: ModeShm, Processor: Qwen3VLProcessor(), ShmDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	net, err := NewSender(Config{Mode: ModeNet, Processor: Qwen3VLProcessor(), Agent: AgentConfig{BufferSize: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()

	// A sender process with live segments, killed, then restarted: the restart sweeps the dead pid.
	h := startHelper(t, "sender", "KVROUTE_TRANSFER_MODE=shm", "KVROUTE_TRANSFER_DIR="+dir)
	for i := range 5 {
		if !strings.HasPrefix(h.call(t, fmt.Sprintf("prepare %d", i)), "{") {
			t.Fatal("helper prepare failed")
		}
	}
	h.kill()
	if n := len(segments(t, dir)); n != 5 {
		t.Fatalf("%d segments after the kill, want the 5 orphans", n)
	}
	h2 := startHelper(t, "sender", "KVROUTE_TRANSFER_MODE=shm", "KVROUTE_TRANSFER_DIR="+dir)
	if !strings.HasPrefix(h2.call(t, "prepare 9"), "{") {
		t.Fatal("restarted helper prepare failed")
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segments after restart, want only the new one", n)
	}

	const requests, clients = 1000, 8
	var next atomic.Int64
	var ok, cancelled, noAck atomic.Int64
	var wg sync.WaitGroup
	r := Receiver{ShmDir: dir}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= requests {
					return
				}
				if err := soakRequest(i, shm, net, &r, &ok, &cancelled, &noAck); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	h2.call(t, "release 0")
	h2.kill()
	if ok.Load()+cancelled.Load()+noAck.Load() != requests {
		t.Fatalf("ok %d cancelled %d no-ack %d", ok.Load(), cancelled.Load(), noAck.Load())
	}
	// A buffer still being written to a worker that hung up (the no-ack requests) is freed when that
	// write ends, after its release: wait for it.
	testutil.Eventually(t, "every item released", func() bool { return shm.Live() == 0 && net.Live() == 0 })
	if n, _ := shm.Sweep(); n != 0 {
		t.Fatalf("janitor found %d orphans at the end", n)
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Fatalf("segments left: %v", segs)
	}
	t.Logf("ok %d, cancelled %d, pulled without ack %d; agent %+v", ok.Load(), cancelled.Load(), noAck.Load(), net.Agent().Stats())
}

// soakRequest is one request's life: prepare, maybe cancel, worker receive, response end → release.
func soakRequest(i int, shm, net *Sender, r *Receiver, ok, cancelled, noAck *atomic.Int64) error {
	s := shm
	if i%2 == 1 {
		s = net
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn := testTensor(i, 16)
	d, release, err := s.PrepareTensor(ctx, &tn)
	if err != nil {
		return fmt.Errorf("request %d: prepare: %w", i, err)
	}
	defer release() // the request actor's "response ended" (normally or not)
	switch {
	case i%5 == 0: // client gone before the worker read it
		cancel()
		cancelled.Add(1)
		return nil
	case i%10 == 3 && d.Kind == KindNet: // worker pulls, then dies before acknowledging
		c, err := dialRaw(d)
		if err != nil {
			return err
		}
		c()
		noAck.Add(1)
		return nil
	}
	got, err := r.Receive(ctx, d)
	if err != nil {
		return fmt.Errorf("request %d: receive: %w", i, err)
	}
	if got.Checksum() != tn.Checksum() {
		return fmt.Errorf("request %d: checksum", i)
	}
	ok.Add(1)
	return nil
}
