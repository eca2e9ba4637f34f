package natsplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/sched"
)

// Replica-sync wire format, version 1 (little-endian; Dynamo's ActiveSequenceEvent fields):
//
//	u8 version | u8 kind (1 add_request, 2 mark_prefill_completed, 3 free, 4 session binding: request id = session id;
//	                     5 an active list: appendReplicaLists)
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
	if routerID, ok = str(); !ok || !validRouterID([]byte(routerID)) {
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

// replicaList is the kind of an active-list message (sched.ActiveList, replica sync's reconciliation),
// after the four load-event kinds:
//
//	u8 version | u8 kind 5 | u16 len | router id | u32 ms between the router's lists
//	u32 n | n × (u64 worker id | u32 dp rank)           the workers the list covers
//	u32 m | m × (u16 len | request id | u32 worker)     active requests, worker an index into the n
const replicaList = 5

// maxListMessage is the size an active list is cut at, between workers: a list of a large fleet's
// requests goes as several messages, each whole for the workers it covers (NATS refuses messages over
// its max_payload, 1 MiB by default). A worker whose requests alone exceed it goes in one message.
const maxListMessage = 256 << 10

// appendReplicaLists encodes l from routerID as messages of at most maxListMessage bytes each, cut
// between workers (none when l covers no worker).
func appendReplicaLists(routerID string, every time.Duration, l *sched.ActiveList) (msgs [][]byte) {
	le := binary.LittleEndian
	at := make(map[scoring.WorkerKey]int, len(l.Workers))
	for i, w := range l.Workers {
		at[w] = i
	}
	per := make([][]string, len(l.Workers))
	for _, r := range l.Requests {
		if i, ok := at[r.Worker]; ok {
			per[i] = append(per[i], r.ID)
		}
	}
	size := func(ids []string) int {
		n := 12 // the worker
		for _, id := range ids {
			n += 6 + len(id)
		}
		return n
	}
	head := 2 + 2 + len(routerID) + 4 + 8
	for lo, hi := 0, 0; lo < len(l.Workers); lo = hi {
		n := head
		for hi < len(l.Workers) && (hi == lo || n+size(per[hi]) <= maxListMessage) {
			n += size(per[hi])
			hi++
		}
		b := make([]byte, 0, n)
		b = append(b, replicaVersion, replicaList)
		b = le.AppendUint16(b, uint16(len(routerID)))
		b = append(b, routerID...)
		b = le.AppendUint32(b, uint32(min(every.Milliseconds(), math.MaxUint32)))
		b = le.AppendUint32(b, uint32(hi-lo))
		reqs := 0
		for i := lo; i < hi; i++ {
			b = le.AppendUint64(b, l.Workers[i].WorkerID)
			b = le.AppendUint32(b, l.Workers[i].DPRank)
			reqs += len(per[i])
		}
		b = le.AppendUint32(b, uint32(reqs))
		for i := lo; i < hi; i++ {
			for _, id := range per[i] {
				b = le.AppendUint16(b, uint16(len(id)))
				b = append(b, id...)
				b = le.AppendUint32(b, uint32(i-lo))
			}
		}
		msgs = append(msgs, b)
	}
	return msgs
}

// decodeReplicaList parses one active-list message (kind replicaList): its router, the interval that
// router publishes its lists at, and the list. Its strings do not alias b.
func decodeReplicaList(b []byte) (routerID string, every time.Duration, l sched.ActiveList, err error) {
	le := binary.LittleEndian
	bad := func(what string) (string, time.Duration, sched.ActiveList, error) {
		return "", 0, sched.ActiveList{}, fmt.Errorf("%w: replica list: %s", ErrBadMessage, what)
	}
	if len(b) < 4 || b[0] != replicaVersion || b[1] != replicaList {
		return bad("version")
	}
	n := int(le.Uint16(b[2:]))
	b = b[4:]
	if len(b) < n || !validRouterID(b[:n]) {
		return bad("router id")
	}
	routerID, b = string(b[:n]), b[n:]
	if len(b) < 8 || le.Uint32(b) == 0 {
		return bad("interval")
	}
	every, b = time.Duration(le.Uint32(b))*time.Millisecond, b[4:]
	// count reads a u32 count of items of at least each bytes, refused when b cannot hold them.
	count := func(each int) (int, bool) {
		if len(b) < 4 {
			return 0, false
		}
		n := int(le.Uint32(b))
		b = b[4:]
		return n, n <= len(b)/each
	}
	nw, ok := count(12)
	if !ok {
		return bad("workers")
	}
	l.Workers = make([]scoring.WorkerKey, nw)
	for i := range l.Workers {
		l.Workers[i] = scoring.WorkerKey{WorkerID: le.Uint64(b), DPRank: le.Uint32(b[8:])}
		b = b[12:]
	}
	nr, ok := count(6)
	if !ok {
		return bad("requests")
	}
	l.Requests = make([]sched.ActiveRequest, nr)
	for i := range l.Requests {
		if len(b) < 2 {
			return bad("request id")
		}
		k := int(le.Uint16(b))
		if len(b) < 6+k {
			return bad("request id")
		}
		w := int(le.Uint32(b[2+k:]))
		if w >= nw {
			return bad("request worker")
		}
		l.Requests[i] = sched.ActiveRequest{ID: string(b[2 : 2+k]), Worker: l.Workers[w]}
		b = b[6+k:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return routerID, every, l, nil
}

// validRouterID: a router id is not empty and holds no NUL (which ends it in sched.RemoteID).
func validRouterID(id []byte) bool { return len(id) > 0 && bytes.IndexByte(id, 0) < 0 }
