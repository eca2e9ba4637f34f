package registry

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	json "github.com/goccy/go-json"
)

// ErrBadSpec is the class of every worker description error.
var ErrBadSpec = errors.New("registry: bad worker spec")

// ErrUnknownWorker: no worker with this id is registered. The fleet (actors/worker.ErrUnknown) and the
// event sources below it (workers/natsplane) share this one sentinel, so a source can tell a batch of a
// worker that has left from a malformed one without importing the fleet.
var ErrUnknownWorker = errors.New("worker: not registered")

// Worker roles (disaggregated prefill/decode serving).
const (
	// RoleBoth is an aggregated worker: it serves whole requests (prefill and decode). The default.
	RoleBoth = "both"
	// RolePrefill computes prompts for remote decode (vLLM kv_transfer_params do_remote_decode) and is
	// routed by the frontend's prefill router only.
	RolePrefill = "prefill"
	// RoleDecode generates tokens from KV it pulls from a prefill worker; it also serves whole requests
	// when a prompt bypasses the prefill hop or no prefill worker is available.
	RoleDecode = "decode"
)

// Serving engines (Spec.Engine).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTRTLLM = "trtllm"
)

// Device classes for device-aware routing.
const (
	DeviceGPU = "gpu"
	DeviceCPU = "cpu"
)

// Spec describes one backend worker. Zero values mean "not given": the router falls back to its own
// defaults or discovers the value from the worker (block size and capacity from vllm:cache_config_info).
type Spec struct {
	// ID is the worker id used in routing answers and the index (Dynamo's WorkerId).
	ID uint64 `json:"id"`
	// URL is the base URL of the worker's OpenAI-compatible API, e.g. http://127.0.0.1:8001.
	URL string `json:"url,omitempty"`
	// Events is the ZMQ endpoint of the worker's KV event publisher (the router connects a SUB to it).
	Events string `json:"events,omitempty"`
	// Replay is the worker's ZMQ replay (ROUTER) endpoint; empty disables gap recovery and restart
	// proof. With events or topic (bind mode); rank r's is offset by r like its events endpoint.
	Replay string `json:"replay,omitempty"`
	// Topic identifies this worker's batches on the router's --kv-events-bind socket, and filters the SUB.
	Topic string `json:"topic,omitempty"`
	// DPSize is the number of data-parallel ranks; rank r publishes on the events port + r.
	DPSize int `json:"dp_size,omitempty"`
	// BlockSize is the engine's KV block size in tokens; it must equal the router's hashing block size.
	BlockSize int `json:"block_size,omitempty"`
	// TotalKVBlocks is the engine's KV capacity in blocks (num_gpu_blocks).
	TotalKVBlocks int `json:"total_kv_blocks,omitempty"`
	// MaxNumBatchedTokens is the engine's per-step token budget (busy threshold fractions use it).
	MaxNumBatchedTokens int `json:"max_num_batched_tokens,omitempty"`
	// Device is "gpu" (default) or "cpu", for device-aware-weighted routing.
	Device string `json:"device,omitempty"`
	// CurveKey is the worker's CURVE public key (40 Z85 characters): the router then accepts the event
	// stream only from the holder of the matching secret key, encrypted.
	CurveKey string `json:"curve_key,omitempty"`
	// Role is "both" (aggregated, the default when empty), "prefill" or "decode": which of the
	// frontend's router cores the worker joins (docs/router.md, disaggregated prefill/decode).
	Role string `json:"role,omitempty"`
	// Model is the served model name the worker answers for (vLLM's --served-model-name). A frontend
	// serving several models routes a request only to workers of its model; empty: the frontend's
	// first model, or the name the worker's /v1/models reports.
	Model string `json:"model,omitempty"`
	// APIKey is the credential the worker's OpenAI API wants (vLLM's --api-key), sent to it as
	// "Authorization: Bearer <key>". It is never logged or shown (worker status carries no spec).
	APIKey string `json:"api_key,omitempty"`
	// APIKeyEnv names an environment variable of the frontend holding the key, so that the key itself
	// appears in no flag, spec or discovery record. Resolved by Key.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// MMScheme is how the worker's KV events identify images: "pad" (the default when empty: image
	// token runs are normalized to pad values, as for vLLM and TensorRT-LLM given the image ids) or
	// "block_mm_infos" (blocks are hashed with their images' mm_hash suffix, Dynamo's legacy scheme, for
	// engines whose events name images per block but whose image tokens cannot be normalized). The
	// frontend routes requests with images in the legacy scheme when every worker of the model uses it.
	MMScheme string `json:"mm_scheme,omitempty"`
	// Engine is the worker's serving engine: "vllm" (the default when empty), "sglang" or "trtllm". It
	// sets the form of the image ids the frontend forwards: vLLM takes a 64-character uuid (the 16-hex
	// mm_hash followed by 48 '0'), SGLang and TensorRT-LLM take the 16-hex id unpadded, as Dynamo's
	// backends forward them. A fleet that mixes forms gets vLLM's, which every engine echoes back.
	Engine string `json:"engine,omitempty"`
}

// RemoteKeyEnvPrefix starts the name of every environment variable a worker registered by someone
// other than the operator (the admin API, a NATS discovery record) may take its API key from
// (api_key_env). The frontend sends the key to the worker's URL, which the registrant chooses: any name
// would let them read any of the frontend's variables (a cloud credential, the router API token) by
// registering a worker of their own. --worker on the command line, set by whoever runs the process, may
// name any variable.
const RemoteKeyEnvPrefix = "KVROUTE_WORKER_KEY"

// z85 is the alphabet of Z85, the encoding of CURVE keys.
const z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// MMSchemeBlockMMInfos is the legacy multimodal hashing scheme (Spec.MMScheme).
const MMSchemeBlockMMInfos = "block_mm_infos"

// PublishesEvents reports whether the worker reports its KV blocks as events, on its own endpoint (Events)
// or on the router's bound socket (Topic).
func (s *Spec) PublishesEvents() bool { return s.Events != "" || s.Topic != "" }

// TakesHexMMIDs reports whether the worker's engine takes image ids as the unpadded 16-hex mm_hash
// (SGLang, TensorRT-LLM) rather than vLLM's 64-character uuid.
func (s *Spec) TakesHexMMIDs() bool { return s.Engine == EngineSGLang || s.Engine == EngineTRTLLM }

// RoleOf returns the worker's role, "both" when none was given.
func (s *Spec) RoleOf() string {
	if s.Role == "" {
		return RoleBoth
	}
	return s.Role
}

// Key returns the worker's API key: APIKey, else the value of the variable APIKeyEnv names.
func (s *Spec) Key() string {
	if s.APIKey != "" {
		return s.APIKey
	}
	if s.APIKeyEnv != "" {
		return os.Getenv(s.APIKeyEnv)
	}
	return ""
}

// Parse reads the flag form: comma-separated key=value pairs, e.g.
// "id=1,url=http://127.0.0.1:8001,events=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558".
func Parse(s string) (Spec, error) {
	var sp Spec
	seenID := false
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return Spec{}, fmt.Errorf("%w: %q is not key=value", ErrBadSpec, field)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var err error
		switch k {
		case "id":
			sp.ID, err = strconv.ParseUint(v, 10, 64)
			seenID = true
		case "url":
			sp.URL = v
		case "events":
			sp.Events = v
		case "replay":
			sp.Replay = v
		case "topic":
			sp.Topic = v
		case "dp_size":
			sp.DPSize, err = strconv.Atoi(v)
		case "block_size":
			sp.BlockSize, err = strconv.Atoi(v)
		case "total_kv_blocks":
			sp.TotalKVBlocks, err = strconv.Atoi(v)
		case "max_num_batched_tokens":
			sp.MaxNumBatchedTokens, err = strconv.Atoi(v)
		case "device":
			sp.Device = v
		case "curve_key":
			sp.CurveKey = v
		case "role":
			sp.Role = v
		case "model":
			sp.Model = v
		case "api_key":
			sp.APIKey = v
		case "api_key_env":
			sp.APIKeyEnv = v
		case "mm_scheme":
			sp.MMScheme = v
		case "engine":
			sp.Engine = v
		default:
			return Spec{}, fmt.Errorf("%w: unknown key %q", ErrBadSpec, k)
		}
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %s=%q: %v", ErrBadSpec, k, v, err)
		}
	}
	if !seenID {
		return Spec{}, fmt.Errorf("%w: missing id", ErrBadSpec)
	}
	return sp, sp.Validate()
}

// Validate checks field ranges and endpoint syntax.
func (s *Spec) Validate() error {
	if s.DPSize < 0 || s.BlockSize < 0 || s.TotalKVBlocks < 0 || s.MaxNumBatchedTokens < 0 {
		return fmt.Errorf("%w: worker %d: negative size", ErrBadSpec, s.ID)
	}
	if s.BlockSize > 1<<16 {
		return fmt.Errorf("%w: worker %d: block_size %d too large", ErrBadSpec, s.ID, s.BlockSize)
	}
	if s.DPSize > 1024 {
		return fmt.Errorf("%w: worker %d: dp_size %d too large", ErrBadSpec, s.ID, s.DPSize)
	}
	switch s.Device {
	case "", DeviceGPU, DeviceCPU:
	default:
		return fmt.Errorf("%w: worker %d: device %q is not gpu or cpu", ErrBadSpec, s.ID, s.Device)
	}
	switch s.MMScheme {
	case "", "pad", MMSchemeBlockMMInfos:
	default:
		return fmt.Errorf("%w: worker %d: mm_scheme %q is not pad or block_mm_infos", ErrBadSpec, s.ID, s.MMScheme)
	}
	switch s.Engine {
	case "", EngineVLLM, EngineSGLang, EngineTRTLLM:
	default:
		return fmt.Errorf("%w: worker %d: engine %q is not vllm, sglang or trtllm", ErrBadSpec, s.ID, s.Engine)
	}
	switch s.Role {
	case "", RoleBoth, RolePrefill, RoleDecode:
	default:
		return fmt.Errorf("%w: worker %d: role %q is not prefill, decode or both", ErrBadSpec, s.ID, s.Role)
	}
	if s.URL != "" {
		if err := checkWorkerURL(s.URL); err != nil {
			return fmt.Errorf("%w: worker %d: url %q: %v", ErrBadSpec, s.ID, s.URL, err)
		}
	}
	for _, ep := range []string{s.Events, s.Replay} {
		if ep != "" && !validZMQEndpoint(ep) {
			return fmt.Errorf("%w: worker %d: %q is not a ZMQ endpoint (tcp://host:port, ipc://, inproc://)", ErrBadSpec, s.ID, ep)
		}
	}
	if s.CurveKey != "" && (len(s.CurveKey) != 40 || strings.Trim(s.CurveKey, z85) != "") {
		return fmt.Errorf("%w: worker %d: curve_key must be 40 Z85 characters", ErrBadSpec, s.ID)
	}
	// The JSON form (admin API, NATS discovery records) would replace invalid UTF-8 with U+FFFD, so
	// another process would read a different topic or model than this one.
	for _, v := range []string{s.Topic, s.Model, s.APIKeyEnv, s.Events, s.Replay} {
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: worker %d: %q is not valid UTF-8", ErrBadSpec, s.ID, v)
		}
	}
	if s.APIKey != "" && s.APIKeyEnv != "" {
		return fmt.Errorf("%w: worker %d: give api_key or api_key_env, not both", ErrBadSpec, s.ID)
	}
	if s.APIKeyEnv != "" {
		if _, ok := os.LookupEnv(s.APIKeyEnv); !ok {
			return fmt.Errorf("%w: worker %d: api_key_env: $%s is not set", ErrBadSpec, s.ID, s.APIKeyEnv)
		}
	}
	for _, c := range []byte(s.APIKey) {
		if c <= 0x20 || c >= 0x7f {
			// It becomes a header value: a newline would forge headers.
			return fmt.Errorf("%w: worker %d: api_key must be printable ASCII without spaces", ErrBadSpec, s.ID)
		}
	}
	if s.Replay != "" && !s.PublishesEvents() {
		return fmt.Errorf("%w: worker %d: replay given without events or topic", ErrBadSpec, s.ID)
	}
	// Rank r connects to the endpoints offset by r (the fleet does not check them again), so the last
	// rank's must exist: a port past 65535 or an ipc:// endpoint with several ranks is refused here.
	for _, ep := range []struct{ name, ep string }{{"events", s.Events}, {"replay", s.Replay}} {
		if ep.ep != "" && s.DPRanks() > 1 {
			if _, err := RankEndpoint(ep.ep, s.DPRanks()-1); err != nil {
				return fmt.Errorf("%w: worker %d: %s %q cannot be offset for %d dp ranks", ErrBadSpec, s.ID, ep.name, ep.ep, s.DPRanks())
			}
		}
	}
	return nil
}

// DPRanks returns the number of data-parallel ranks, at least 1.
func (s *Spec) DPRanks() int {
	if s.DPSize <= 1 {
		return 1
	}
	return s.DPSize
}

// RankEndpoint offsets a tcp endpoint's port by rank, as vLLM's offset_endpoint_port does; rank 0 and
// non-tcp endpoints are returned unchanged for rank 0, and an error for rank > 0 on non-tcp endpoints
// (inproc gets the _dp suffix).
func RankEndpoint(ep string, rank int) (string, error) {
	if ep != "" && !validZMQEndpoint(ep) {
		return "", fmt.Errorf("%w: %q is not a ZMQ endpoint (tcp://host:port, ipc://, inproc://)", ErrBadSpec, ep)
	}
	if rank == 0 || ep == "" {
		return ep, nil
	}
	switch {
	case strings.HasPrefix(ep, "tcp://"):
		i := strings.LastIndexByte(ep, ':')
		port, err := strconv.Atoi(ep[i+1:])
		if i < len("tcp://") || err != nil {
			return "", fmt.Errorf("%w: %q has no port", ErrBadSpec, ep)
		}
		if rank < 0 || port+rank > 65535 {
			return "", fmt.Errorf("%w: %q offset by dp rank %d is past port 65535", ErrBadSpec, ep, rank)
		}
		return ep[:i+1] + strconv.Itoa(port+rank), nil
	case strings.HasPrefix(ep, "inproc://"):
		return fmt.Sprintf("%s_dp%d", ep, rank), nil
	default:
		return "", fmt.Errorf("%w: %q cannot be offset for dp rank %d", ErrBadSpec, ep, rank)
	}
}

func validZMQEndpoint(ep string) bool {
	switch {
	case strings.HasPrefix(ep, "tcp://"):
		rest := ep[len("tcp://"):]
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			return false
		}
		p, err := strconv.Atoi(rest[i+1:])
		return err == nil && p > 0 && p < 65536
	case strings.HasPrefix(ep, "ipc://"), strings.HasPrefix(ep, "inproc://"):
		return len(ep) > len("ipc://")
	}
	return false
}

// ParseJSON reads the JSON form of a Spec (the body of POST /v1/workers). The id is required and unknown
// fields are refused, so a misspelt key is an error rather than a silently ignored setting.
func ParseJSON(body []byte) (Spec, error) {
	var probe struct {
		ID *uint64 `json:"id"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if probe.ID == nil {
		return Spec{}, fmt.Errorf("%w: missing id", ErrBadSpec)
	}
	var sp Spec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sp); err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	return sp, sp.Validate()
}

// ExpandBindEndpoints expands the values of a repeatable bind flag into endpoints, one per dp rank in
// order: each value is an endpoint (tcp://*:5557) or a tcp port range (tcp://*:5557-5560, ranks 0..3 of
// a data-parallel engine publishing to port + rank), or a comma list of either.
func ExpandBindEndpoints(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, ep := range strings.Split(v, ",") {
			ep = strings.TrimSpace(ep)
			if ep == "" {
				continue
			}
			i := strings.LastIndexByte(ep, ':')
			if lo, hi, ok := strings.Cut(ep[i+1:], "-"); ok && strings.HasPrefix(ep, "tcp://") && i > len("tcp://") {
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 != nil || err2 != nil || a <= 0 || b < a || b > 65535 || b-a >= 1024 {
					return nil, fmt.Errorf("%w: bind port range %q", ErrBadSpec, ep)
				}
				for p := a; p <= b; p++ {
					out = append(out, ep[:i+1]+strconv.Itoa(p))
				}
				continue
			}
			if !validZMQEndpoint(ep) && !strings.HasSuffix(ep, ":*") {
				return nil, fmt.Errorf("%w: %q is not a ZMQ endpoint to bind", ErrBadSpec, ep)
			}
			out = append(out, ep)
		}
	}
	return out, nil
}

// checkWorkerURL accepts http(s)://host[:port][/path] with an ASCII host (a name, an IPv4 address or a
// bracketed IPv6 address) and a port in 1..65535: the URL requests are sent to, so nothing a client
// would read another way (userinfo, query, fragment, non-ASCII or control bytes).
func checkWorkerURL(raw string) error {
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= 0x20 || c >= 0x7f {
			return fmt.Errorf("byte %#x is not allowed", c)
		}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return err
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme must be http or https")
	case u.User != nil:
		return fmt.Errorf("userinfo is not allowed")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Errorf("query and fragment are not allowed")
	case u.Opaque != "":
		return fmt.Errorf("not a hierarchical URL")
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("no host")
	}
	if strings.HasPrefix(u.Host, "[") {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("bad IPv6 host")
		}
	} else {
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return fmt.Errorf("host %q has a character %q a host name cannot have", host, c)
			}
		}
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not in 1..65535", p)
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("empty port")
	}
	return nil
}
