package sched

import (
	"math/bits"
	"slices"

	"github.com/kvroute/kvroute/scoring"
	"github.com/kvroute/kvroute/scoring/prefix"
)

// Matcher is an Index that also answers in groups of worker slots with equal overlap (actors/indexer's
// Match, prefix.Matches). The machine then maps each index keys table's slots to its targets once, and
// a decision scatters the groups through that map: no Score per worker is written or read, and no worker
// key is looked up.
type Matcher interface {
	Match(local []uint64, m *prefix.Matches)
}

// overlap is a decision's overlap with the prompt: Scores per worker, or the index's groups (grouped not
// nil) and the side index's predictions to merge into them (side; into Scores they are merged before,
// by maxScores).
type overlap struct {
	scores  []prefix.Score
	grouped *prefix.Matches
	side    []prefix.Score
}

// raisedOverlap is a target's overlap in the engines' report, before a prediction raised it.
type raisedOverlap struct {
	target  int
	primary uint32
}

// slotRows maps the slots of one keys table of the index to target positions (-1: no target).
type slotRows struct {
	keys []prefix.WorkerKey // the table (immutable: prefix.Matches), held so that its address is not reused
	rows []int32
}

// maxSlotMaps bounds the keys tables whose slot maps the machine keeps (an index has one per shard).
const maxSlotMaps = 16

// slotMap returns the slot → target map of keys, built on first sight of the table: a table is
// replaced only when the index gives a removed worker's slot to another (appends keep it, and grow
// its length). Maps are dropped whenever target positions change (extend, drop).
func (m *Machine) slotMap(keys []prefix.WorkerKey) []int32 {
	maps := m.sc.slots
	for i := range maps {
		if c := &maps[i]; len(c.keys) == len(keys) && len(keys) > 0 && &c.keys[0] == &keys[0] {
			return c.rows
		}
	}
	var c *slotRows
	if len(maps) < maxSlotMaps {
		m.sc.slots = append(maps, slotRows{})
		c = &m.sc.slots[len(maps)]
	} else {
		m.slotVictim = (m.slotVictim + 1) % maxSlotMaps
		c = &maps[m.slotVictim]
	}
	c.keys = keys
	c.rows = slices.Grow(c.rows[:0], len(keys))[:len(keys)]
	for s, k := range keys {
		c.rows[s] = -1
		if i, ok := m.pos.find(scoring.WorkerKey(k)); ok {
			c.rows[s] = int32(i)
		}
	}
	return c.rows
}

// groupOverlaps writes the groups' overlaps into ov by target index, and offers them to t: every slot
// as listed, every slot mapped to a target as that target.
func (m *Machine) groupOverlaps(g *prefix.Matches, ov []uint32, t *overlapTop) {
	for p := range g.Parts() {
		keys, groups := g.Part(p)
		rows := m.slotMap(keys)
		for _, gr := range groups {
			base := rows[gr.Word<<6:]
			t.listed(gr.Blocks, bits.OnesCount64(gr.Set))
			for s := gr.Set; s != 0; s &= s - 1 {
				i := base[bits.TrailingZeros64(s)]
				if i < 0 {
					continue
				}
				ov[i] = gr.Blocks
				t.target(gr.Blocks, int(i))
			}
		}
	}
}

// ungroup returns the overlap as Scores: grouped expanded into the machine's scratch, or scores when
// grouped is nil.
func (m *Machine) ungroup(scores []prefix.Score, grouped *prefix.Matches) []prefix.Score {
	if grouped == nil {
		return scores
	}
	m.sc.scores = grouped.AppendScores(m.sc.scores[:0])
	return m.sc.scores
}
