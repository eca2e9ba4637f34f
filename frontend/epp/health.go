package epp

import (
	"context"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Health answers the gRPC health protocol for the gateway's and kubelet's probes: "liveness" (and "")
// is SERVING while the process answers; "readiness" and the ext_proc service name are SERVING when
// Ready reports true (enough workers ready, not draining).
type Health struct {
	healthpb.UnimplementedHealthServer
	// Ready reports whether the picker can route; nil means always.
	Ready func() bool
}

var _ healthpb.HealthServer = (*Health)(nil)

// Check answers one probe.
func (h *Health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case "", "liveness":
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case "readiness", ServiceName:
		if h.Ready == nil || h.Ready() {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return nil, status.Errorf(codes.NotFound, "epp: unknown health service %q", req.GetService())
}
