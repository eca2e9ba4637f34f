package epp

import (
	"errors"
	"fmt"
)

// Names of the endpoint picker protocol (Gateway API Inference Extension).
const (
	// DestinationKey is the request header and the dynamic-metadata key that carry the picked endpoints:
	// "ip:port", or "ip:port,ip:port,..." with fallbacks after the primary.
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey is the metadata key the gateway sets on the response: the endpoint that served it.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetKey is the filter-metadata key of the endpoints the gateway allows for this request.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// DefaultNamespace is the metadata namespace of DestinationKey and ServedKey.
	DefaultNamespace = "envoy.lb"
	// DefaultSubsetNamespace is the metadata namespace of SubsetKey.
	DefaultSubsetNamespace = "envoy.lb.subset_hint"
	// ServiceName is the ext_proc gRPC service, also a health-check service name.
	ServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// FailureMode is what the picker does when it cannot pick for a reason that is not the client's (no
// ready workers, all busy, an internal error). It mirrors the InferencePool's
// spec.endpointPickerRef.failureMode, which tells the gateway what to do when the picker itself fails.
type FailureMode string

const (
	// FailClose answers the request with the error (503, or 429/529 when a queue refused it).
	FailClose FailureMode = "FailClose"
	// FailOpen lets the request continue with no destination: the gateway forwards it to an endpoint
	// of its own picking, as it would with the picker down.
	FailOpen FailureMode = "FailOpen"
)

// ErrBadConfig is the class of every Config error.
var ErrBadConfig = errors.New("epp: bad config")

// Config configures the picker.
type Config struct {
	// Namespace is the dynamic-metadata namespace of the destination (default "envoy.lb").
	Namespace string
	// SubsetNamespace is the filter-metadata namespace of the gateway's endpoint subset (default
	// "envoy.lb.subset_hint").
	SubsetNamespace string
	// Fallbacks is how many endpoints follow the primary in the destination list, cheapest first
	// (the gateway tries them in order when it retries). Default 0: the router's load accounting then
	// always charges the worker that serves. With fallbacks, the served endpoint the gateway reports
	// moves the request's load to it.
	Fallbacks int
	// FailureMode: FailClose (default) or FailOpen.
	FailureMode FailureMode
	// MaxBodyBytes bounds a request body gathered from the gateway's chunks (413 above). Default 32 MiB,
	// as the frontend's --max-body-bytes.
	MaxBodyBytes int
	// MaxBodyBytesInFlight bounds the bytes of all the request bodies being gathered at once, over every
	// stream: a chunk that would pass it is answered 503 (retry) and its stream's bytes let go. A body
	// is let go once the request is picked (it went back to the gateway), not kept for the response's
	// life. Default (0) 256 MiB; raised to MaxBodyBytes when under it, as the frontend's
	// --max-body-bytes-in-flight.
	MaxBodyBytesInFlight int
	// MaxStreams bounds the exchanges open at once (gRPC streams: one per HTTP request the gateway
	// proxies, from its headers to its response's end). One past it ends at once, before a message is
	// read, with RESOURCE_EXHAUSTED: the picker is as if down for that request, and the gateway applies
	// the pool's failure mode. Default (0) 16,384, as the frontend's --max-concurrent-requests.
	MaxStreams int
}

// DefaultConfig returns the protocol's default names, no fallbacks, FailClose, a 32 MiB body bound,
// 16,384 streams.
func DefaultConfig() Config {
	return Config{Namespace: DefaultNamespace, SubsetNamespace: DefaultSubsetNamespace, FailureMode: FailClose,
		MaxBodyBytes: 32 << 20, MaxBodyBytesInFlight: 256 << 20, MaxStreams: 16384}
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.Namespace == "" || c.SubsetNamespace == "":
		return fmt.Errorf("%w: metadata namespaces must be set", ErrBadConfig)
	case c.Fallbacks < 0 || c.Fallbacks > 16:
		return fmt.Errorf("%w: fallbacks %d: want 0 to 16", ErrBadConfig, c.Fallbacks)
	case c.FailureMode != FailClose && c.FailureMode != FailOpen:
		return fmt.Errorf("%w: failure mode %q: want FailClose or FailOpen", ErrBadConfig, c.FailureMode)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("%w: max body bytes must be positive", ErrBadConfig)
	}
	return nil
}
