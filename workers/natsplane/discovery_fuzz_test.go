package natsplane

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvroute/kvroute/internal/clock"
	"github.com/kvroute/kvroute/workers/registry"
)

// entry is one key-value bucket entry as the watch delivers it.
type entry struct {
	key     string
	value   []byte
	op      jetstream.KeyValueOp
	created time.Time
}

func (e entry) Bucket() string                  { return DiscoveryBucket }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return 1 }
func (e entry) Created() time.Time              { return e.created }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

// workerSet is a WorkerSet over a map, refusing a duplicate id or an unknown removal as the router does.
type workerSet struct {
	workers map[uint64]registry.Spec
	added   []registry.Spec
}

func (s *workerSet) AddWorker(sp registry.Spec) error {
	if _, ok := s.workers[sp.ID]; ok {
		return fmt.Errorf("worker %d: duplicate", sp.ID)
	}
	s.workers[sp.ID] = sp
	s.added = append(s.added, sp)
	return nil
}

func (s *workerSet) Has(id uint64) bool {
	_, ok := s.workers[id]
	return ok
}

func (s *workerSet) RemoveWorker(id uint64) error {
	if _, ok := s.workers[id]; !ok {
		return registry.ErrUnknownWorker
	}
	delete(s.workers, id)
	return nil
}

// discoveryOps turns fuzz bytes into a sequence of bucket entries: each record is an operation byte
// (its low two bits: put, delete, purge; the next bit: an entry older than the TTL), a key and a value,
// the last two separated by 0x00 and ended by 0x01.
func discoveryOps(b []byte, now time.Time) []entry {
	var out []entry
	for len(b) > 0 && len(out) < 16 {
		op := b[0]
		rec, rest, _ := strings.Cut(string(b[1:]), "\x01")
		b = []byte(rest)
		key, val, _ := strings.Cut(rec, "\x00")
		e := entry{key: key, value: []byte(val), op: jetstream.KeyValueOp(op & 3 % 3), created: now}
		if op&4 != 0 {
			e.created = now.Add(-time.Minute)
		}
		out = append(out, e)
	}
	return out
}

func discoveryRecord(op byte, key, val string) []byte {
	return []byte(string(op) + key + "\x00" + val + "\x01")
}

// FuzzDiscoveryEntries plays arbitrary sequences of discovery bucket entries (what any NATS client
// allowed to write the kvroute-workers bucket can put there) through the frontend's watcher: it never
// panics; it adds only records the admin API's parser accepts (registry.ParseJSON) under their canonical
// key, and no api_key_env outside the prefix every remote registration is held to; and its workers are
// always the set's.
func FuzzDiscoveryEntries(f *testing.F) {
	good := `{"id":7,"url":"http://127.0.0.1:9007","block_size":16}`
	seeds := [][]byte{
		discoveryRecord(0, "7", good),
		append(discoveryRecord(0, "7", good), discoveryRecord(1, "7", "")...),
		append(discoveryRecord(0, "7", good), discoveryRecord(0, "7", `{"id":7,"url":"http://127.0.0.1:9008","block_size":16}`)...),
		discoveryRecord(4, "7", good),
		discoveryRecord(0, "8", good),
		discoveryRecord(0, "x", good),
		discoveryRecord(0, "7", `{"id":7,"typo":1}`),
		discoveryRecord(0, "7", `{"id":7} {"id":8}`),
		discoveryRecord(0, "7", `{"id":7,"api_key_env":"HOME","url":"http://127.0.0.1:1"}`),
		append(discoveryRecord(0, "07", `{"id":7}`), discoveryRecord(1, "7", "")...),
		discoveryRecord(0, "7", `{"id":7,"events":"tcp://127.0.0.1:5557","replay":"tcp://127.0.0.1:5558","dp_size":4}`),
		discoveryRecord(2, "7", ""),
		discoveryRecord(0, "7", "null"),
		discoveryRecord(0, "18446744073709551615", `{"id":18446744073709551615}`),
	}
	for _, s := range seeds {
		f.Add(s)
	}
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		set := &workerSet{workers: map[uint64]registry.Spec{}}
		w := NewWatcher(nil, set, DiscoveryConfig{TTL: 10 * time.Second, Clock: clock.NewFake(now)})
		cur := map[uint64]*known{}
		for _, e := range discoveryOps(b, now) {
			before := len(set.added)
			w.apply(cur, e)
			for _, sp := range set.added[before:] {
				want, err := registry.ParseJSON(e.value)
				if err != nil || want != sp {
					t.Fatalf("added %+v from %q, which the registry's parser answers %+v, %v", sp, e.value, want, err)
				}
				if e.key != strconv.FormatUint(sp.ID, 10) {
					t.Fatalf("added worker %d under key %q", sp.ID, e.key)
				}
				if sp.APIKeyEnv != "" && !strings.HasPrefix(sp.APIKeyEnv, registry.RemoteKeyEnvPrefix) {
					t.Fatalf("added worker %d whose key comes from $%s", sp.ID, sp.APIKeyEnv)
				}
			}
			if len(cur) != len(set.workers) {
				t.Fatalf("watcher knows %d workers, the set holds %d", len(cur), len(set.workers))
			}
			for id, k := range cur {
				if sp, ok := set.workers[id]; !ok || sp != k.spec {
					t.Fatalf("worker %d: watcher %+v, set %+v (%v)", id, k.spec, sp, ok)
				}
			}
		}
		if st := w.Stats(); st.Errors != 0 {
			t.Fatalf("the set refused %d of the watcher's changes", st.Errors)
		}
	})
}
