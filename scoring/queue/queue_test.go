package queue

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/scoring"
)

var epoch = time.Unix(1_000_000, 0)

func at(sec float64) time.Time { return epoch.Add(time.Duration(sec * float64(time.Second))) }

func TestOrder(t *testing.T) {
	type in struct {
		name string
		key  Key
	}
	tests := []struct {
		name   string
		policy scoring.QueuePolicy
		items  []in
		want   []string
	}{
		{"fcfs arrival order", scoring.QueueFCFS, []in{
			{"b", Key{Arrival: at(2)}}, {"a", Key{Arrival: at(1)}}, {"c", Key{Arrival: at(3)}},
		}, []string{"a", "b", "c"}},
		{"fcfs jump moves arrival earlier", scoring.QueueFCFS, []in{
			{"a", Key{Arrival: at(1)}}, {"c", Key{Arrival: at(3), PriorityJump: 2.5}}, {"b", Key{Arrival: at(2)}},
		}, []string{"c", "a", "b"}},
		{"fcfs ties in insertion order", scoring.QueueFCFS, []in{
			{"x", Key{Arrival: at(1)}}, {"y", Key{Arrival: at(1)}}, {"z", Key{Arrival: at(1)}},
		}, []string{"x", "y", "z"}},
		{"lcfs", scoring.QueueLCFS, []in{
			{"a", Key{Arrival: at(1)}}, {"c", Key{Arrival: at(3)}}, {"b", Key{Arrival: at(2)}},
		}, []string{"c", "b", "a"}},
		{"wspt short uncached first", scoring.QueueWSPT, []in{
			{"long", Key{ISL: 1000}}, {"cached", Key{ISL: 1000, BestCachedTokens: 990}}, {"short", Key{ISL: 100}},
		}, []string{"cached", "short", "long"}},
		{"wspt jump", scoring.QueueWSPT, []in{
			{"short", Key{ISL: 100}}, {"long-urgent", Key{ISL: 300, PriorityJump: 3}},
		}, []string{"long-urgent", "short"}},
		{"strict tier beats everything", scoring.QueueFCFS, []in{
			{"early", Key{Arrival: at(0), PriorityJump: 100}}, {"tier1", Key{Arrival: at(9), Strict: 1}}, {"tier2", Key{Arrival: at(10), Strict: 2}},
		}, []string{"tier2", "tier1", "early"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := New[string](tc.policy, epoch)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range tc.items {
				q.Push(it.key, it.name)
			}
			var got []string
			for q.Len() > 0 {
				v, _, _ := q.Pop()
				got = append(got, v)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
			if _, _, ok := q.Pop(); ok {
				t.Fatal("pop on empty")
			}
		})
	}
}

func TestRekeyAndPolicy(t *testing.T) {
	q, _ := New[int](scoring.QueueWSPT, epoch)
	q.Push(Key{ISL: 100}, 1)
	q.Push(Key{ISL: 200}, 2)
	q.Rekey(func(k Key, v int) Key {
		if v == 2 {
			k.BestCachedTokens = 190
		}
		return k
	})
	if v, _, _ := q.Peek(); v != 2 {
		t.Fatalf("after rekey peek %d", v)
	}
	if _, err := New[int]("sjf", epoch); !errors.Is(err, ErrBadPolicy) {
		t.Fatalf("bad policy: %v", err)
	}
	for _, c := range []struct{ in, want float64 }{{-3, 0}, {math.NaN(), 0}, {2, 2}} {
		if got := Jump(c.in); got != c.want {
			t.Errorf("Jump(%v) = %v", c.in, got)
		}
	}
}
