package natsplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Subjects, headers and JetStream names of the planes. Every name is fixed so that relays, frontends and
// simulators agree without configuration; separate deployments use separate NATS accounts or servers.
const (
	// EventSubjectPrefix + worker id is a worker's KV event subject; frontends subscribe to
	// EventSubjectPrefix + "*" (plain subscribe, not a queue group: every frontend sees every event).
	EventSubjectPrefix = "kv-events."
	// EventStream is the JetStream stream over every event subject (--durable-kv-events).
	EventStream = "KV_EVENTS"
	// SnapshotBucket / SnapshotObject: the object store entry of the latest index snapshot (Dynamo's
	// radix-bucket / radix-state).
	SnapshotBucket = "radix-bucket"
	SnapshotObject = "radix-state"
	// ReplicaSubject carries replica-sync load events (Dynamo's active_sequences_events).
	ReplicaSubject = "active_sequences_events"
	// DiscoveryBucket is the key-value bucket of live workers (key: worker id in decimal).
	DiscoveryBucket = "kvroute-workers"

	// Headers of an event message. The payload is the batch in the current vLLM wire layout
	// (kvevents.AppendBatch, LayoutMap) with dp_rank filled in: the relay normalizes legacy layouts, so
	// frontends decode one shape.
	HeaderSeq   = "Kv-Seq"   // the engine's batch sequence number (per dp rank), decimal
	HeaderRank  = "Kv-Rank"  // dp rank, decimal
	HeaderEpoch = "Kv-Epoch" // relay instance: a new epoch replays the worker's ring from seq 0
	HeaderReset = "Kv-Reset" // "1": the engine restarted; no payload
)

// EventSubject is the subject of a worker's KV events.
func EventSubject(workerID uint64) string {
	return EventSubjectPrefix + strconv.FormatUint(workerID, 10)
}

// workerOf parses the worker id out of an event subject.
func workerOf(subject string) (uint64, error) {
	s, ok := strings.CutPrefix(subject, EventSubjectPrefix)
	if !ok {
		return 0, fmt.Errorf("%w: subject %q", ErrBadMessage, subject)
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: subject %q", ErrBadMessage, subject)
	}
	return id, nil
}

// Errors.
var (
	// ErrBadMessage: a message on a plane subject that does not parse (counted and dropped).
	ErrBadMessage = errors.New("natsplane: malformed message")
	// ErrBadConfig: a configuration that cannot work.
	ErrBadConfig = errors.New("natsplane: bad configuration")
)

// StreamConfig is the JetStream stream of --durable-kv-events: every worker's subject, file storage,
// MaxAge retention (Dynamo keeps one hour), replicas as given (3 on a three-node cluster).
func StreamConfig(replicas int) jetstream.StreamConfig {
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.StreamConfig{Name: EventStream, Subjects: []string{EventSubjectPrefix + "*"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, MaxAge: time.Hour, Replicas: replicas, Duplicates: 2 * time.Minute}
}

// EnsureEventStream creates the event stream or updates it to StreamConfig(replicas). Relays and
// frontends both call it; identical configs make the race harmless.
func EnsureEventStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	st, err := js.CreateOrUpdateStream(ctx, StreamConfig(replicas))
	if err != nil {
		return nil, fmt.Errorf("natsplane: stream %s: %w", EventStream, err)
	}
	return st, nil
}
