package mocker

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-json"
	"github.com/kvroute/kvroute/internal/routine"
	"github.com/kvroute/kvroute/workers/kvevents"
)

// specKind is the kv_cache_spec_kind current vLLM sends for a plain decoder.
const specKind = "full_attention"

// batchFromEvents fills b with the engine events of one step, shaped as current vLLM sends them: medium
// "GPU", group_idx 0, kv_cache_spec_kind "full_attention" on stores, one extra_keys entry per stored block
// (None for text-only blocks), dp_rank always present. Hash and token slices are copied or alias
// memory the engine never mutates, so b stays valid after the next Step.
func batchFromEvents(b *kvevents.Batch, evs []KVEvent, ts time.Time, dpRank int) {
	b.Reset()
	b.TS = float64(ts.UnixNano()) / 1e9
	b.DPRank, b.HasDPRank = uint32(dpRank), true
	if cap(b.Events) < len(evs) {
		b.Events = make([]kvevents.Event, 0, len(evs))
	}
	for i := range evs {
		ev := &evs[i]
		out := kvevents.Event{Medium: "GPU", GroupIdx: 0, HasGroupIdx: true}
		switch ev.Kind {
		case EventStored:
			out.Kind = kvevents.Stored
			out.BlockHashes = hashesToU64(ev.Hashes)
			out.ParentHash, out.HasParent = uint64(ev.Parent), ev.HasParent
			out.TokenIDs = ev.Tokens
			out.BlockSize = ev.BlockSize
			out.LoraName = ev.LoraName
			out.ExtraKeys = make([][]kvevents.ExtraKey, len(ev.Extra))
			for j, k := range ev.Extra {
				out.ExtraKeys[j] = extraToWire(k)
			}
			out.SpecKind = specKind
		case EventRemoved:
			out.Kind = kvevents.Removed
			out.BlockHashes = hashesToU64(ev.Hashes)
		case EventCleared:
			out = kvevents.Event{Kind: kvevents.Cleared}
		}
		b.Events = append(b.Events, out)
	}
}

func hashesToU64(hs []BlockHash) []uint64 {
	out := make([]uint64, len(hs))
	for i, h := range hs {
		out[i] = uint64(h)
	}
	return out
}

// extraToWire turns one block's extra keys into vLLM's tuple: LoRA name, (mm id, offset) pairs, cache salt.
func extraToWire(k *ExtraKeys) []kvevents.ExtraKey {
	if k == nil {
		return nil
	}
	out := make([]kvevents.ExtraKey, 0, k.Len())
	if k.LoraName != "" {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraString, Str: k.LoraName})
	}
	for _, m := range k.MM {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraMM, Str: m.ID, Int: int64(m.Offset)})
	}
	if k.CacheSalt != "" {
		out = append(out, kvevents.ExtraKey{Kind: kvevents.ExtraString, Str: k.CacheSalt})
	}
	return out
}

// KVEventsConfig is vLLM's --kv-events-config plus the event layout.
type KVEventsConfig struct {
	// Enable is enable_kv_cache_events.
	Enable bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null" (vLLM's names); "null" disables publishing.
	Publisher string `json:"publisher"`
	// Endpoint is the PUB endpoint for rank 0; rank r adds r to a tcp port. It binds when it contains
	// "*" or "::" or is ipc:// or inproc://, and connects otherwise. Default "tcp://*:5557".
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER endpoint for rank 0 (always bound); "" disables replay.
	ReplayEndpoint string `json:"replay_endpoint"`
	// BufferSteps is the replay ring length in batches. Default 10000.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's high-water mark. Default 100000.
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the queue between the rank loop and the publisher goroutine. Default 100000.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is frame 0 of every message. Default "".
	Topic string `json:"topic"`
	// Layout is the event shape: kvevents.LayoutMap (current vLLM, default) or LayoutArray (legacy).
	Layout kvevents.Layout `json:"-"`
	// ReplayPoll is how often an idle publisher checks its replay socket. Default 20ms: a fleet of 64
	// workers then idles at about 2 % of a core instead of 10 % (kvevents' own default is 5ms); a replay
	// answer is delayed by at most this much.
	ReplayPoll time.Duration `json:"-"`
	// CurveSecretKey, when set, makes the event and replay sockets CURVE servers with this Z85 secret
	// key: only routers that know the matching public key can subscribe (--kv-events-curve-server-key).
	CurveSecretKey string `json:"-"`
	// SkipSend, when set, withholds the batch with that seq from the PUB socket while keeping it in the
	// replay ring (fault injection: a subscriber sees a gap and recovers it through replay).
	SkipSend func(seq uint64) bool `json:"-"`
}

// DefaultKVEventsConfig is vLLM's default with events enabled.
func DefaultKVEventsConfig() KVEventsConfig {
	return KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}
}

// ParseKVEventsConfig parses vLLM's --kv-events-config JSON over DefaultKVEventsConfig, with Enable false
// unless the JSON enables it, as in vLLM.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := DefaultKVEventsConfig()
	c.Enable = false
	c.Publisher = ""
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return c, fmt.Errorf("%w: --kv-events-config: %v", ErrBadConfig, err)
	}
	switch c.Publisher {
	case "":
		c.Publisher = "zmq"
		if !c.Enable {
			c.Publisher = "null"
		}
	case "zmq", "null":
	default:
		return c, fmt.Errorf("%w: --kv-events-config: publisher %q (want zmq or null)", ErrBadConfig, c.Publisher)
	}
	if c.Publisher == "null" {
		c.Enable = false
	}
	return c, nil
}

// ParseEventFormat maps --event-format map|array|trtllm to a layout.
func ParseEventFormat(s string) (kvevents.Layout, error) {
	switch s {
	case "map", "":
		return kvevents.LayoutMap, nil
	case "array", "legacy":
		return kvevents.LayoutArray, nil
	case "trtllm":
		return kvevents.LayoutTRTLLM, nil
	}
	return 0, fmt.Errorf("%w: --event-format %q (want map, array or trtllm)", ErrBadConfig, s)
}

// OffsetEndpoint is vLLM's offset_endpoint_port: tcp://host:P → tcp://host:P+rank, inproc://x →
// inproc://x_dp{rank}; rank 0 unchanged.
func OffsetEndpoint(ep string, rank int) string {
	if rank == 0 || ep == "" {
		return ep
	}
	if rest, ok := strings.CutPrefix(ep, "inproc://"); ok {
		return "inproc://" + rest + "_dp" + strconv.Itoa(rank)
	}
	i := strings.LastIndexByte(ep, ':')
	if !strings.HasPrefix(ep, "tcp://") || i < 0 {
		return ep
	}
	p, err := strconv.Atoi(ep[i+1:])
	if err != nil {
		return ep
	}
	return ep[:i+1] + strconv.Itoa(p+rank)
}

// dialable turns a bind endpoint into one a local subscriber can connect to (tcp://*:P → tcp://127.0.0.1:P).
func dialable(ep string) string {
	if rest, ok := strings.CutPrefix(ep, "tcp://*:"); ok {
		return "tcp://127.0.0.1:" + rest
	}
	if rest, ok := strings.CutPrefix(ep, "tcp://0.0.0.0:"); ok {
		return "tcp://127.0.0.1:" + rest
	}
	if rest, ok := strings.CutPrefix(ep, "tcp://[::]:"); ok {
		return "tcp://127.0.0.1:" + rest
	}
	return ep
}

// zmqPublisher runs one workers/kvevents Publisher (its Run goroutine owns the sockets) for a rank.
type zmqPublisher struct {
	p      *kvevents.Publisher
	cancel context.CancelFunc
	ctx    context.Context
	runErr chan error
}

// zmqPublish runs a rank's ZMQ publisher until its context ends; Close reads its result from runErr.
var zmqPublish = routine.Named("mocker.zmq-publish")

// newZMQPublisher opens rank's publisher: endpoints offset by rank as vLLM does, sockets ready on return.
func newZMQPublisher(c KVEventsConfig, rank int) (EventPublisher, error) {
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{
		Endpoint:       OffsetEndpoint(c.Endpoint, rank),
		ReplayEndpoint: OffsetEndpoint(c.ReplayEndpoint, rank),
		Topic:          c.Topic,
		Layout:         c.Layout,
		BufferSteps:    c.BufferSteps,
		HWM:            c.HWM,
		QueueSize:      c.MaxQueueSize,
		SkipSend:       c.SkipSend,
		CurveSecretKey: c.CurveSecretKey,
		PollInterval:   cmp.Or(c.ReplayPoll, 20*time.Millisecond),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	z := &zmqPublisher{p: p, cancel: cancel, ctx: ctx, runErr: make(chan error, 1)}
	zmqPublish.Go(func() { z.runErr <- p.Run(ctx) })
	select {
	case <-p.Ready():
		return z, nil
	case err := <-z.runErr:
		cancel()
		return nil, err
	}
}

func (z *zmqPublisher) Publish(b *kvevents.Batch) error { return z.p.Publish(z.ctx, b) }

func (z *zmqPublisher) Close() error {
	z.cancel()
	<-z.p.Done()
	return nil
}

// endpoints reports the resolved PUB and replay addresses, dialable from this host.
func (z *zmqPublisher) endpoints() (string, string) {
	return dialable(z.p.Addr()), dialable(z.p.ReplayAddr())
}
