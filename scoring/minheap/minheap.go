// Package minheap is the one binary heap of the module: the request queue (scoring/queue) and the
// approximate index's expiry order (scoring.ApproxIndex) keep their elements in a plain slice they own and
// order it with these functions.
//
// # Overview
//
// container/heap needs an interface value and boxes every Push/Pop through `any`; these generic functions
// take the slice and a before function instead, so elements stay unboxed and a caller can still read
// h[0] or walk the slice. before(a, b) reports whether a must pop before b (a strict weak order).
//
// # Concurrency model
//
// None: the functions run on the caller's goroutine over the caller's slice, which has one owner.
//
// # Ownership
//
// The caller owns the slice; Push and Pop return it resliced, as append does.
//
// # Data flow
//
//	Push(h, x) ─▶ append, sift up · Pop(h) ─▶ swap last to root, sift down · Init ─▶ heapify after bulk edits
package minheap

// Init orders h in O(n), after its elements were changed in bulk.
func Init[E any](h []E, before func(a, b *E) bool) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		Down(h, i, before)
	}
}

// Push appends x and restores the order; it returns the grown slice.
func Push[E any](h []E, x E, before func(a, b *E) bool) []E {
	h = append(h, x)
	Up(h, len(h)-1, before)
	return h
}

// Pop removes the first element (h must not be empty) and returns it with the shortened slice.
func Pop[E any](h []E, before func(a, b *E) bool) (E, []E) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	if n > 0 {
		Down(h, 0, before)
	}
	return top, h
}

// Up moves h[i] towards the root while it comes before its parent.
func Up[E any](h []E, i int, before func(a, b *E) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !before(&h[i], &h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

// Down moves h[i] towards the leaves while a child comes before it.
func Down[E any](h []E, i int, before func(a, b *E) bool) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && before(&h[r], &h[l]) {
			m = r
		}
		if !before(&h[m], &h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
