package natsplane

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/scoring/prefix"
)

// Snapshot format (little-endian), version 1:
//
//	magic "KVRS" | u32 version | u64 stream seq
//	u32 n states  | n × (u64 worker | u32 rank | u64 last seq | u8 has | u16 len | epoch bytes)
//	u64 n entries | n × (u64 worker | u32 rank | u8 has parent | u64 parent | u64 engine hash | u64 local hash)
//
// Entries are prefix.Index.Dump's single-block stores, parents before children.
var snapshotMagic = [4]byte{'K', 'V', 'R', 'S'}

const snapshotVersion = 1

// ErrBadSnapshot: the object store holds a snapshot this version cannot read.
var ErrBadSnapshot = errors.New("natsplane: bad snapshot")

// snapshot dumps the index as of streamSeq (every message up to it applied) to the object store. It runs
// on the delivery goroutine, under mu, so no batch enters between the barrier and the dump.
func (s *Source) snapshot(ctx context.Context, streamSeq uint64) error {
	s.fleet.Barrier()
	var buf bytes.Buffer
	w := func(v any) { _ = binary.Write(&buf, binary.LittleEndian, v) }
	buf.Write(snapshotMagic[:])
	w(uint32(snapshotVersion))
	w(streamSeq)
	keys := make([]prefix.WorkerKey, 0, len(s.states))
	for k := range s.states {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].WorkerID != keys[j].WorkerID {
			return keys[i].WorkerID < keys[j].WorkerID
		}
		return keys[i].DPRank < keys[j].DPRank
	})
	w(uint32(len(keys)))
	for _, k := range keys {
		st := s.states[k]
		w(k.WorkerID)
		w(k.DPRank)
		w(st.Last)
		w(b2u(st.Has))
		w(uint16(len(st.Epoch)))
		buf.WriteString(st.Epoch)
	}
	var entries bytes.Buffer
	n := uint64(0)
	s.fleet.Index.Dump(func(e prefix.DumpEntry) {
		n++
		_ = binary.Write(&entries, binary.LittleEndian, struct {
			W       uint64
			R       uint32
			HasP    uint8
			P, E, L uint64
		}{e.Worker.WorkerID, e.Worker.DPRank, b2u(e.HasParent), e.Parent, e.Block.EngineHash, e.Block.LocalHash})
	})
	w(n)
	buf.Write(entries.Bytes())
	meta := jetstream.ObjectMeta{Name: SnapshotObject, Metadata: map[string]string{snapshotSeqKey: strconv.FormatUint(streamSeq, 10)}}
	if _, err := s.objs.Put(ctx, meta, &buf); err != nil {
		return fmt.Errorf("natsplane: snapshot put: %w", err)
	}
	return nil
}

// snapshotSeqKey is the snapshot object's metadata key holding the stream sequence it covers, readable
// without fetching the snapshot.
const snapshotSeqKey = "stream-seq"

// snapshotFresh reports whether the object store already holds a snapshot within half a threshold of
// streamSeq (behind or ahead: another frontend reading the same stream wrote it), so this frontend need
// not dump its own. Any doubt (no snapshot, no sequence in its metadata, the store not answering) is
// false: dump.
func (s *Source) snapshotFresh(ctx context.Context, streamSeq uint64) bool {
	info, err := s.objs.GetInfo(ctx, SnapshotObject)
	if err != nil || info == nil {
		return false
	}
	seq, err := strconv.ParseUint(info.Metadata[snapshotSeqKey], 10, 64)
	if err != nil {
		return false
	}
	half := uint64(s.cfg.SnapshotThreshold / 2)
	return seq+half >= streamSeq
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// restore loads the latest snapshot into the index and the sequence state, and returns its stream
// sequence (0 when there is none: read the stream from the start).
func (s *Source) restore(ctx context.Context) (uint64, error) {
	data, err := s.getSnapshot(ctx)
	if err != nil || data == nil {
		return 0, err
	}
	rd := bytes.NewReader(data)
	streamSeq, states, err := readSnapshotHeader(rd)
	if err != nil {
		return 0, err
	}
	n, err := s.restoreEntries(rd)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.states = states
	s.mu.Unlock()
	s.restored.Store(n)
	s.streamSeq.Store(streamSeq)
	return streamSeq, nil
}

// getSnapshot reads the snapshot object; nil without error when there is none yet. JetStream answers
// "no responders" or times out while a cluster elects the object store's leader (a replica starting next
// to a NATS restart): it retries for a bounded while before giving up.
func (s *Source) getSnapshot(ctx context.Context) ([]byte, error) {
	data, err := s.objs.GetBytes(ctx, SnapshotObject)
	for wait := 50 * time.Millisecond; err != nil && (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout)) && wait <= 2*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		data, err = s.objs.GetBytes(ctx, SnapshotObject)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsplane: snapshot get: %w", err)
	}
	return data, nil
}

// readSnapshotHeader reads the magic, the version, the stream sequence the snapshot covers and every
// rank's sequence state.
func readSnapshotHeader(rd *bytes.Reader) (uint64, map[prefix.WorkerKey]*rankState, error) {
	r := func(v any) error { return binary.Read(rd, binary.LittleEndian, v) }
	var magic [4]byte
	var version uint32
	var streamSeq uint64
	if _, err := io.ReadFull(rd, magic[:]); err != nil || magic != snapshotMagic {
		return 0, nil, fmt.Errorf("%w: magic", ErrBadSnapshot)
	}
	if err := r(&version); err != nil || version != snapshotVersion {
		return 0, nil, fmt.Errorf("%w: version %d", ErrBadSnapshot, version)
	}
	if err := r(&streamSeq); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	var nStates uint32
	if err := r(&nStates); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	states := map[prefix.WorkerKey]*rankState{}
	for i := uint32(0); i < nStates; i++ {
		var k prefix.WorkerKey
		var st rankState
		var has uint8
		var el uint16
		if err := errors.Join(r(&k.WorkerID), r(&k.DPRank), r(&st.Last), r(&has), r(&el)); err != nil {
			return 0, nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		ep := make([]byte, el)
		if _, err := io.ReadFull(rd, ep); err != nil {
			return 0, nil, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		st.Epoch, st.Has = string(ep), has == 1
		states[k] = &st
	}
	return streamSeq, states, nil
}

// restoreEntries reads the index entries and restores them into the index in chunks, so that a large
// snapshot does not sit in memory twice; it returns how many there were.
func (s *Source) restoreEntries(rd *bytes.Reader) (uint64, error) {
	r := func(v any) error { return binary.Read(rd, binary.LittleEndian, v) }
	var n uint64
	if err := r(&n); err != nil || n > uint64(rd.Len())/37 {
		return 0, fmt.Errorf("%w: entry count", ErrBadSnapshot)
	}
	chunk := make([]prefix.DumpEntry, 0, 4096)
	for i := uint64(0); i < n; i++ {
		var e struct {
			W       uint64
			R       uint32
			HasP    uint8
			P, E, L uint64
		}
		if err := r(&e); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		chunk = append(chunk, prefix.DumpEntry{Worker: prefix.WorkerKey{WorkerID: e.W, DPRank: e.R}, Parent: e.P, HasParent: e.HasP == 1,
			Block: prefix.Block{EngineHash: e.E, LocalHash: e.L}})
		if len(chunk) == cap(chunk) {
			s.fleet.Index.Restore(chunk)
			chunk = chunk[:0]
		}
	}
	s.fleet.Index.Restore(chunk)
	s.fleet.Index.Flush()
	return n, nil
}
