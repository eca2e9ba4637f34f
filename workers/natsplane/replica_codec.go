package natsplane

import (
	"encoding/binary"
	"fmt"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

// Replica-sync wire format, version 1 (little-endian; Dynamo's ActiveSequenceEvent fields):
//
//	u8 version | u8 kind (1 add_request, 2 mark_prefill_completed, 3 free, 4 session binding: request id = session id)
//	u16 len | router id | u16 len | request id | u64 worker id | u32 dp rank
//	add_request only: u32 isl | u32 overlap blocks | u32 expected output tokens
//	                  u8 flags (1 assume_kv_reuse, 2 track_prefill_tokens set, 4 its value)
//	                  u32 n | n × u64 token_sequence (router sequence hashes)
//
// Binary rather than JSON: an AddRequest carries one hash per prompt block, and decoding JSON numbers was
// a third of a replica's CPU at 30k routes/s (BenchmarkRouteFrontends).
const replicaVersion = 1

// appendReplicaEvent encodes ev from routerID onto dst.
func appendReplicaEvent(dst []byte, routerID string, ev *sched.LoadEvent) []byte {
	le := binary.LittleEndian
	dst = append(dst, replicaVersion, byte(ev.Kind))
	dst = le.AppendUint16(dst, uint16(len(routerID)))
	dst = append(dst, routerID...)
	dst = le.AppendUint16(dst, uint16(len(ev.RequestID)))
	dst = append(dst, ev.RequestID...)
	dst = le.AppendUint64(dst, ev.Worker.WorkerID)
	dst = le.AppendUint32(dst, ev.Worker.DPRank)
	if ev.Kind != sched.LoadAdd {
		return dst
	}
	dst = le.AppendUint32(dst, uint32(ev.ISL))
	dst = le.AppendUint32(dst, ev.OverlapBlocks)
	dst = le.AppendUint32(dst, uint32(ev.ExpectedOutputTokens))
	var flags byte
	if ev.AssumeKVReuse {
		flags |= 1
	}
	if ev.TrackPrefillTokens != nil {
		flags |= 2
		if *ev.TrackPrefillTokens {
			flags |= 4
		}
	}
	dst = append(dst, flags)
	dst = le.AppendUint32(dst, uint32(len(ev.SeqHashes)))
	for _, h := range ev.SeqHashes {
		dst = le.AppendUint64(dst, h)
	}
	return dst
}

// decodeReplicaEvent parses one message. The event's strings and hashes do not alias b.
func decodeReplicaEvent(b []byte) (routerID string, ev sched.LoadEvent, err error) {
	le := binary.LittleEndian
	bad := func(what string) (string, sched.LoadEvent, error) {
		return "", sched.LoadEvent{}, fmt.Errorf("%w: replica event: %s", ErrBadMessage, what)
	}
	if len(b) < 2 || b[0] != replicaVersion {
		return bad("version")
	}
	ev.Kind = sched.LoadEventKind(b[1])
	if ev.Kind < sched.LoadAdd || ev.Kind > sched.LoadBind {
		return bad("kind")
	}
	b = b[2:]
	str := func() (string, bool) {
		if len(b) < 2 {
			return "", false
		}
		n := int(le.Uint16(b))
		if len(b) < 2+n {
			return "", false
		}
		s := string(b[2 : 2+n])
		b = b[2+n:]
		return s, true
	}
	var ok bool
	if routerID, ok = str(); !ok {
		return bad("router id")
	}
	if ev.RequestID, ok = str(); !ok {
		return bad("request id")
	}
	if len(b) < 12 {
		return bad("worker")
	}
	ev.Worker = scoring.WorkerKey{WorkerID: le.Uint64(b), DPRank: le.Uint32(b[8:])}
	b = b[12:]
	if ev.Kind != sched.LoadAdd {
		if len(b) != 0 {
			return bad("trailing bytes")
		}
		return routerID, ev, nil
	}
	if len(b) < 17 {
		return bad("add_request fields")
	}
	ev.ISL, ev.OverlapBlocks, ev.ExpectedOutputTokens = int(le.Uint32(b)), le.Uint32(b[4:]), int(le.Uint32(b[8:]))
	flags := b[12]
	ev.AssumeKVReuse = flags&1 != 0
	if flags&2 != 0 {
		v := flags&4 != 0
		ev.TrackPrefillTokens = &v
	}
	n := int(le.Uint32(b[13:]))
	b = b[17:]
	if n < 0 || len(b) != 8*n {
		return bad("token_sequence length")
	}
	ev.SeqHashes = make([]uint64, n)
	for i := range ev.SeqHashes {
		ev.SeqHashes[i] = le.Uint64(b[8*i:])
	}
	return routerID, ev, nil
}
