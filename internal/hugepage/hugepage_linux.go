package hugepage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	madvHugepage   = 14 // MADV_HUGEPAGE
	madvNoHugepage = 15 // MADV_NOHUGEPAGE
	madvPopulateW  = 23 // MADV_POPULATE_WRITE (Linux 5.14)
	hugeSize       = 2 << 20
)

// Reserve grows the Go heap by n bytes that nothing touches, advises the heap's mappings MADV_HUGEPAGE
// and releases the bytes again (a GC runs): the heap's next n bytes of pages are faulted in as huge
// pages. Of the free heap, ahead bytes (rounded up to huge pages) are faulted in now, the lowest first,
// and each Advise faults more in once the runtime has used half of them. It returns ErrUnsupported where
// the kernel refuses the advice.
func Reserve(n, ahead int) (*Heap, Stats, error) {
	if err := supported(); err != nil {
		return nil, Stats{}, err
	}
	if n < hugeSize {
		n = hugeSize
	}
	// In pieces: the runtime zeroes a large allocation whole when any of its pages were used before,
	// and one such page in a single 1 GiB object made it write (and the host back) the whole GiB.
	// Pieces on fresh memory are left untouched; those on freed memory are zeroed, as any use of that
	// memory would be.
	bufs := make([][]byte, 0, (n+reservePiece-1)/reservePiece)
	for left := n; left > 0; left -= reservePiece {
		bufs = append(bufs, make([]byte, min(left, reservePiece)))
	}
	h := &Heap{anchor: uintptr(unsafe.Pointer(unsafe.SliceData(bufs[0])))}
	st, err := h.Advise()
	runtime.KeepAlive(bufs)
	bufs = nil
	runtime.GC()
	if err != nil {
		return nil, Stats{}, err
	}
	// The runtime now holds the reservation as freed pages it believes resident, which its scavenger
	// would hand back 64 KiB at a time (splitting every huge page it touches); released, they are pages
	// it believes gone and leaves alone until it allocates them. Then fault the lowest of them in, as
	// huge pages.
	debug.FreeOSMemory()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ahead = (uintptr(max(ahead, 0)) + hugeSize - 1) &^ (hugeSize - 1)
	if err := h.topUp(&st); err != nil {
		return nil, Stats{}, err
	}
	return h, st, nil
}

// reservePiece is the size of the allocations a reservation is made of.
const reservePiece = 64 << 20

// topUp keeps h.ahead bytes of free heap faulted in ahead of the runtime's use. The runtime's page
// allocator takes the lowest free addresses first, so the pages it will use next are the lowest the
// kernel does not hold: topUp faults in the lowest wholly absent huge pages of the advised heap. What
// is already ahead is what the runtime counts released but the kernel holds (mincore); while that is at
// least half the budget, nothing is done. Under a memory limit it faults in only as much as the limit
// leaves room for (room), less what is already ahead. Called with h.mu held.
func (h *Heap) topUp(st *Stats) error {
	// Released first: pages the scavenger releases meanwhile then count as absent, not ahead.
	released, _ := runtimeMemory()
	var absent uintptr // bytes of the advised heap the kernel does not hold
	var holes []span   // wholly absent huge pages, in address order, adjacent ones merged
	for _, s := range h.done {
		pages := int((s.end - s.start) / pageSize)
		if cap(h.vec) < pages {
			h.vec = make([]byte, pages)
		}
		vec := h.vec[:pages]
		if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, s.start, s.end-s.start, uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
			return fmt.Errorf("hugepage: mincore(%#x, %d): %w", s.start, s.end-s.start, e)
		}
		for i := 0; i < pages; i += hugeSize / pageSize {
			n := 0
			for _, v := range vec[i : i+hugeSize/pageSize] {
				n += int(^v & 1)
			}
			absent += uintptr(n) * pageSize
			if n < hugeSize/pageSize {
				continue
			}
			at := s.start + uintptr(i)*pageSize
			if k := len(holes) - 1; k >= 0 && holes[k].end == at {
				holes[k].end += hugeSize
			} else {
				holes = append(holes, span{at, at + hugeSize})
			}
		}
	}
	var ahead uintptr
	if released > absent {
		ahead = released - absent
	}
	st.Ahead = int(ahead)
	if ahead >= h.ahead/2 {
		return nil
	}
	want := h.ahead - ahead
	if r := room(); r != ^uintptr(0) {
		want = min(want, r-min(r, ahead)) // room counts what is ahead as free, as the runtime does
	}
	want &^= hugeSize - 1
	for _, s := range holes {
		if want == 0 {
			break
		}
		n := min(s.end-s.start, want)
		if err := st.populate(s.start, n); err != nil {
			return err
		}
		want -= n
	}
	return nil
}

// runtimeMemory reads, without stopping the world (runtime.ReadMemStats would), the heap memory the
// runtime counts released to the kernel and all the memory it has mapped.
func runtimeMemory() (released, total uintptr) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0, 0
	}
	return uintptr(s[0].Value.Uint64()), uintptr(s[1].Value.Uint64())
}

// pageSize is the small page mincore reports on.
const pageSize = 4096

// room is how much memory a limit on the runtime (GOMEMLIMIT, debug.SetMemoryLimit) leaves beside what
// the runtime holds now, in whole huge pages: pages faulted in ahead are resident but counted released
// until the runtime allocates them, so under a limit they are faulted in only as far as it leaves room.
// No limit: no bound (^uintptr(0)).
func room() uintptr {
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 {
		return ^uintptr(0)
	}
	released, total := runtimeMemory()
	free := limit - int64(total-released)
	if free <= 0 {
		return 0
	}
	return uintptr(free) &^ (hugeSize - 1)
}

// populate faults n bytes from start in, writable, without writing them (MADV_POPULATE_WRITE): under
// the MADV_HUGEPAGE advice, as huge pages. Pages already there are left as they are, so it is safe on
// memory the program uses. It adds the bytes and the time to st; a kernel before 5.14 refuses the
// advice, and then nothing is populated.
//
// One huge page a call: a call holds the process's mmap lock for reading while the host backs its
// pages, and the runtime's next mapping of heap waits for it, so a call is kept short; the periodic
// pass's thread, which runs at the lowest priority, then holds it up at most a huge page's fault.
func (st *Stats) populate(start, n uintptr) error {
	t0 := time.Now()
	defer func() { st.Populating += time.Since(t0) }()
	for at := start; at < start+n; at += hugeSize {
		k := min(hugeSize, start+n-at)
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, at, k, madvPopulateW); e != 0 {
			if errors.Is(e, syscall.EINVAL) {
				return nil
			}
			return e
		}
		st.Populated += int(k)
	}
	return nil
}

// mainThread reports whether the calling goroutine runs on the process's main thread.
func mainThread() bool { return unix.Gettid() == unix.Getpid() }

// idleThread puts the calling thread under SCHED_IDLE: it runs only on CPU time no other thread of the
// machine wants.
func idleThread() error {
	return unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
}

// Advise advises the parts of the heap's mappings not advised before (those the runtime mapped since,
// as the heap grew), then tops up the pages faulted in ahead of the runtime (once Reserve has).
func (h *Heap) Advise() (Stats, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return Stats{}, err
	}
	var st Stats
	for _, m := range heapSpans(maps, h.anchor) {
		for _, s := range uncovered(h.done, m) {
			if err := adviseHuge(s.start, s.end-s.start); err != nil {
				return st, err
			}
			h.done = cover(h.done, s)
			st.Mappings++
			st.Bytes += int(s.end - s.start)
		}
	}
	if h.ahead > 0 {
		err = h.topUp(&st)
	}
	return st, err
}

// mapping is one line of /proc/self/maps: its range, whether it is readable and writable, and whether
// it is anonymous (no file, no name).
type mapping struct {
	start, end uintptr
	rw, anon   bool
}

// parseMapping reads a mapping's line of /proc/self/maps (the header line of its entry in smaps); ok is
// false for any other line.
func parseMapping(line []byte) (m mapping, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 5 {
		return m, false
	}
	dash := bytes.IndexByte(f[0], '-')
	if dash < 0 {
		return m, false
	}
	s, err1 := strconv.ParseUint(string(f[0][:dash]), 16, 64)
	e, err2 := strconv.ParseUint(string(f[0][dash+1:]), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return m, false
	}
	// Anonymous: no inode and no name but an anon_name (kernels with CONFIG_ANON_VMA_NAME, where the
	// Go runtime names its heap "[anon: Go: heap]").
	anon := string(f[4]) == "0" && (len(f) == 5 || bytes.HasPrefix(f[5], []byte("[anon:")))
	return mapping{start: uintptr(s), end: uintptr(e), rw: bytes.HasPrefix(f[1], []byte("rw")), anon: anon}, true
}

func parseMaps(maps []byte) []mapping {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		if m, ok := parseMapping(sc.Bytes()); ok {
			out = append(out, m)
		}
	}
	return out
}

// eachAdvice calls fn with every mapping of /proc/self/smaps and whether it carries the MADV_HUGEPAGE
// advice (VmFlags "hg"): what the advice reached, as the kernel reports it.
func eachAdvice(fn func(m mapping, advised bool)) error {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var cur mapping
	for sc.Scan() {
		line := sc.Bytes()
		if m, ok := parseMapping(line); ok {
			cur = m
			continue
		}
		if flags, ok := bytes.CutPrefix(line, []byte("VmFlags:")); ok {
			fn(cur, slices.Contains(strings.Fields(string(flags)), "hg"))
		}
	}
	return sc.Err()
}

// AdvisedBytes is the size of the process's anonymous mappings that carry the MADV_HUGEPAGE advice.
func AdvisedBytes() (int, error) {
	total := 0
	err := eachAdvice(func(m mapping, advised bool) {
		if advised && m.anon {
			total += int(m.end - m.start)
		}
	})
	return total, err
}

// IsAdvised reports whether the mapping that holds addr carries the MADV_HUGEPAGE advice.
func IsAdvised(addr uintptr) (bool, error) {
	found, yes := false, false
	err := eachAdvice(func(m mapping, advised bool) {
		if m.start <= addr && addr < m.end {
			found, yes = true, advised
		}
	})
	if err == nil && !found {
		err = fmt.Errorf("hugepage: no mapping holds %#x", addr)
	}
	return yes, err
}

// heapSpans returns the read-write parts, rounded inward to huge pages, of the run of adjacent anonymous
// mappings that contains addr (the runtime's arenas: mapped read-write, or reserved without access).
func heapSpans(maps []byte, addr uintptr) []span {
	ms := parseMaps(maps)
	at := -1
	for i, m := range ms {
		if m.anon && m.start <= addr && addr < m.end {
			at = i
			break
		}
	}
	if at < 0 {
		return nil
	}
	lo, hi := at, at
	for lo > 0 && ms[lo-1].anon && ms[lo-1].end == ms[lo].start {
		lo--
	}
	for hi+1 < len(ms) && ms[hi+1].anon && ms[hi+1].start == ms[hi].end {
		hi++
	}
	var out []span
	for _, m := range ms[lo : hi+1] {
		s := (m.start + hugeSize - 1) &^ (hugeSize - 1)
		e := m.end &^ (hugeSize - 1)
		if m.rw && e > s {
			out = append(out, span{s, e})
		}
	}
	return out
}

// supported is ErrUnsupported, with the reason, where the host gives no transparent huge pages.
func supported() error {
	if mode, err := Mode(); err != nil || mode == "never" {
		return fmt.Errorf("%w (THP mode %q, %v)", ErrUnsupported, mode, err)
	}
	return nil
}

// adviseHuge advises n bytes from start MADV_HUGEPAGE; a kernel without THP refuses it (ErrUnsupported).
func adviseHuge(start, n uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, start, n, madvHugepage); e != 0 {
		if errors.Is(e, syscall.EINVAL) {
			return ErrUnsupported
		}
		return e
	}
	return nil
}

// Mode is the host's THP mode: always, madvise or never (the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled).
func Mode() (string, error) {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "", err
	}
	_, rest, ok := bytes.Cut(b, []byte("["))
	word, _, ok2 := bytes.Cut(rest, []byte("]"))
	if !ok || !ok2 {
		return "", fmt.Errorf("THP mode: unexpected %q", bytes.TrimSpace(b))
	}
	return string(word), nil
}

// Mapped returns an anonymous mapping of n bytes (rounded up to huge pages) outside the Go heap, advised
// MADV_HUGEPAGE before anything touches it, and its release. It holds no Go pointers.
func Mapped(n int) (buf []byte, release func(), err error) {
	if err := supported(); err != nil {
		return nil, nil, err
	}
	n = (n + hugeSize - 1) &^ (hugeSize - 1)
	// One huge page more, so that the advised part can start on a huge-page boundary.
	raw, err := syscall.Mmap(-1, 0, n+hugeSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, err
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
	off := int((base+hugeSize-1)&^(hugeSize-1) - base)
	buf = raw[off : off+n : off+n]
	if err := adviseHuge(uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(n)); err != nil {
		_ = syscall.Munmap(raw)
		return nil, nil, err
	}
	return buf, func() { _ = syscall.Munmap(raw) }, nil
}

// MappedSmall returns an anonymous mapping of n bytes outside the Go heap, advised MADV_NOHUGEPAGE before
// anything touches it (so that its pages stay 4 KiB under THP "always" too), and its release.
func MappedSmall(n int) (buf []byte, release func(), err error) {
	if err := supported(); err != nil {
		return nil, nil, err
	}
	buf, err = syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, err
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(unsafe.SliceData(buf))), uintptr(n), madvNoHugepage); e != 0 {
		_ = syscall.Munmap(buf)
		return nil, nil, e
	}
	return buf, func() { _ = syscall.Munmap(buf) }, nil
}

// MemTotal is the machine's memory in bytes (/proc/meminfo's MemTotal).
func MemTotal() (int, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				return 0, fmt.Errorf("hugepage: /proc/meminfo: %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("hugepage: /proc/meminfo has no MemTotal")
}
