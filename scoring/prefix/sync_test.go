//go:build linux

package prefix

import (
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"
)

// readOnlyNode returns a copy of nd in a page of its own that the caller can make read-only (protect), so
// that a write to it faults. The collector does not see the copy's slices from there: the caller keeps
// nd, which shares them, alive until it is done.
func readOnlyNode(t *testing.T, nd *node) (d *node, protect func()) {
	page, err := syscall.Mmap(-1, 0, syscall.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(page) })
	d = (*node)(unsafe.Pointer(&page[0]))
	*d = *nd
	return d, func() {
		if err := syscall.Mprotect(page, syscall.PROT_READ); err != nil {
			t.Fatalf("mprotect: %v", err)
		}
	}
}

// TestSyncWritesOnlyWhatChanged: syncNode writes nothing of a node's copy that equals the index's node
// (its page read-only: a write would fault), and when a worker past the inline words joins, writes only
// that word of the worker set (the node's own page still read-only). The copy then equals the node.
func TestSyncWritesOnlyWhatChanged(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	src := &node{
		hashes: []uint64{1, 2, 3}, start: 64, live: true, parent: 3, edges: true, head: 5, tail: 6,
		sums: []uint64{9}, kids: children{first: kid{7, 8}, n: 2, rest: []kid{{10, 11}}},
	}
	src.workers.set(3)
	src.workers.set(300)
	src.synced = uint32(len(src.hashes))
	view := &node{
		hashes: append([]uint64(nil), src.hashes...), sums: append([]uint64(nil), src.sums...),
		kids:    children{first: src.kids.first, n: src.kids.n, rest: append([]kid(nil), src.kids.rest...)},
		workers: src.workers.clone(), start: src.start, live: true, parent: 3, edges: true, head: 5, tail: 6,
	}
	d, protect := readOnlyNode(t, view)
	protect()
	sync := func(what string) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: syncNode wrote to the copy's node: %v", what, r)
			}
		}()
		syncNode(d, src)
	}
	sync("nothing changed")
	ext := d.workers.ext
	src.workers.set(310) // the same word past the inline ones as 300
	sync("a worker joined past the inline words")
	if !d.workers.equal(&src.workers) || !d.workers.has(310) || unsafe.SliceData(d.workers.ext) != unsafe.SliceData(ext) {
		t.Fatalf("worker set %v, want %v in the same words", d.workers.bits(), src.workers.bits())
	}
	runtime.KeepAlive(view)
}

// TestSyncSlice: syncSlice leaves *d equal to src in every case (room or not, longer or shorter, a
// known-equal head), in the same array while it has the room.
func TestSyncSlice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d, src  []uint64
		from    int
		sameArr bool
	}{
		{"equal", []uint64{1, 2, 3}, []uint64{1, 2, 3}, 0, true},
		{"one differs", []uint64{1, 2, 3}, []uint64{1, 5, 3}, 0, true},
		{"shorter", []uint64{1, 2, 3}, []uint64{1}, 1, true},
		{"longer, room", append(make([]uint64, 0, 8), 1, 2), []uint64{1, 2, 3, 4}, 2, true},
		{"longer, no room", []uint64{1, 2}, []uint64{1, 2, 3, 4, 5}, 2, false},
		{"to empty", []uint64{1}, nil, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			syncSlice(&d, tc.src, tc.from)
			if len(d) != len(tc.src) {
				t.Fatalf("%v, want %v", d, tc.src)
			}
			for i := range d {
				if d[i] != tc.src[i] {
					t.Fatalf("%v, want %v", d, tc.src)
				}
			}
			if same := cap(tc.d) > 0 && cap(d) > 0 && &d[:1][0] == &tc.d[:1][0]; same != tc.sameArr {
				t.Fatalf("same array %v, want %v", same, tc.sameArr)
			}
		})
	}
}
