package worker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/workers/registry"
)

// TestCowSetChangesLeaveEarlierVersions: every version a reader loaded keeps what it held while later
// versions add and remove, by id and by topic, across all parts; a removal of a key the set lacks
// returns the set itself.
func TestCowSetChangesLeaveEarlierVersions(t *testing.T) {
	ids := func(s *cowSet[uint64]) []uint64 {
		var out []uint64
		s.each(func(m *Mirror) { out = append(out, m.Spec.ID) })
		slices.Sort(out)
		return out
	}
	var versions []*cowSet[uint64]
	var want [][]uint64
	s := newIDSet()
	var held []uint64
	for id := uint64(1); id <= 300; id++ { // several keys in every part
		s = s.with(id, &Mirror{Spec: registry.Spec{ID: id}})
		held = append(held, id)
		if id%50 == 0 {
			versions, want = append(versions, s), append(want, slices.Clone(held))
		}
	}
	for id := uint64(1); id <= 300; id += 3 {
		s = s.without(id)
		held = slices.DeleteFunc(held, func(x uint64) bool { return x == id })
	}
	versions, want = append(versions, s), append(want, held)
	if same := s.without(1); same != s {
		t.Fatal("removing a key the set lacks made a new version")
	}
	for i, v := range versions {
		if got := ids(v); !slices.Equal(got, want[i]) || v.len() != len(want[i]) {
			t.Fatalf("version %d holds %d ids (len %d), want %d", i, len(got), v.len(), len(want[i]))
		}
		for _, id := range want[i] {
			if m, ok := v.get(id); !ok || m.Spec.ID != id {
				t.Fatalf("version %d: id %d not found", i, id)
			}
		}
	}
	if _, ok := s.get(1); ok {
		t.Fatal("a removed id is still found")
	}
	replaced := &Mirror{Spec: registry.Spec{ID: 2}}
	if r := s.with(2, replaced); r.len() != s.len() {
		t.Fatalf("replacing a key changed the size: %d, was %d", r.len(), s.len())
	} else if m, _ := r.get(2); m != replaced {
		t.Fatal("a replaced key kept its old mirror")
	}

	topics := newTopicSet()
	for i := range 100 {
		topics = topics.with(fmt.Sprintf("kv@worker-%d", i), &Mirror{Spec: registry.Spec{ID: uint64(i)}})
	}
	before := topics
	topics = topics.without("kv@worker-7")
	if _, ok := topics.get("kv@worker-7"); ok || topics.len() != 99 {
		t.Fatalf("topic removal: still found %v, len %d", ok, topics.len())
	}
	if m, ok := before.get("kv@worker-7"); !ok || m.Spec.ID != 7 || before.len() != 100 {
		t.Fatal("the earlier topic version lost a topic")
	}
}
