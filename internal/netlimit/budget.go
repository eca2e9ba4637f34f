package netlimit

import "sync/atomic"

// Budget bounds the bytes that the requests in flight hold at once, over every connection or stream: a
// try, never a wait (what does not fit is refused or left out by the caller). A nil Budget has no
// bound. Safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget bounds the bytes held at once to max.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// TryTake reserves n bytes if they fit under the bound (a nil budget: always).
func (b *Budget) TryTake(n int64) bool {
	if b == nil {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Give returns n reserved bytes.
func (b *Budget) Give(n int64) {
	if b != nil && n != 0 {
		b.used.Add(-n)
	}
}

// InUse is the bytes held now.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}
