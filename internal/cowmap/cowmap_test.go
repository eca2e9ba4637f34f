package cowmap

import (
	"fmt"
	"maps"
	"testing"
)

// TestChangesLeaveEarlierVersions: every version a reader loaded keeps what it held while later
// versions add, replace and remove keys, by id and by string, across all parts; a removal of a key the
// map lacks returns the map itself; GetBytes finds what Get finds.
func TestChangesLeaveEarlierVersions(t *testing.T) {
	var versions []*Map[uint64, string]
	var want []map[uint64]string
	m := NewByID[string]()
	held := map[uint64]string{}
	for id := uint64(1); id <= 300; id++ { // several keys in every part
		m = m.With(id, fmt.Sprint("v", id))
		held[id] = fmt.Sprint("v", id)
		if id%50 == 0 {
			versions, want = append(versions, m), append(want, maps.Clone(held))
		}
	}
	for id := uint64(1); id <= 300; id += 3 {
		m = m.Without(id)
		delete(held, id)
	}
	m = m.With(2, "replaced")
	held[2] = "replaced"
	versions, want = append(versions, m), append(want, held)
	if same := m.Without(1); same != m {
		t.Fatal("removing a key the map lacks made a new version")
	}
	for i, v := range versions {
		if got := maps.Collect(v.All()); !maps.Equal(got, want[i]) || v.Len() != len(want[i]) {
			t.Fatalf("version %d holds %d keys (Len %d), want %d", i, len(got), v.Len(), len(want[i]))
		}
		for id, s := range want[i] {
			if got, ok := v.Get(id); !ok || got != s {
				t.Fatalf("version %d: key %d gives %q, %v; want %q", i, id, got, ok, s)
			}
		}
	}
	if _, ok := m.Get(1); ok {
		t.Fatal("a removed key is still found")
	}

	topics := NewByString[int]()
	for i := range 100 {
		topics = topics.With(fmt.Sprintf("kv@worker-%d", i), i)
	}
	before := topics
	topics = topics.Without("kv@worker-7")
	if _, ok := topics.Get("kv@worker-7"); ok || topics.Len() != 99 {
		t.Fatalf("string removal: still found %v, Len %d", ok, topics.Len())
	}
	if v, ok := GetBytes(before, []byte("kv@worker-7")); !ok || v != 7 || before.Len() != 100 {
		t.Fatal("the earlier version lost a key")
	}
	for i := range 100 {
		k := fmt.Sprintf("kv@worker-%d", i)
		a, okA := topics.Get(k)
		b, okB := GetBytes(topics, []byte(k))
		if a != b || okA != okB || okA != (i != 7) {
			t.Fatalf("%s: Get %d %v, GetBytes %d %v", k, a, okA, b, okB)
		}
	}
	seen := 0
	for range topics.All() {
		if seen++; seen == 5 {
			break
		}
	}
	if seen != 5 {
		t.Fatalf("a range over All stopped after %d keys, want 5", seen)
	}
}
