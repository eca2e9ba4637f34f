//go:build linux

package hugepage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kvroute/kvroute/internal/testutil"
)

func TestHeapSpans(t *testing.T) {
	maps := []byte(`00400000-004ac000 r-xp 00000000 fe:00 9978127                            /usr/bin/kvroute
2185a0000000-2185a4000000 rw-p 00000000 00:00 0 
2185a4000000-2185a5c00000 ---p 00000000 00:00 0 
2185a5c00000-2185ac500000 rw-p 00000000 00:00 0                          [anon: Go: heap]
2185ac500000-2185b0000000 ---p 00000000 00:00 0 
2185b0000000-2185b0400000 rw-p 00000000 00:00 0 
2185c0000000-2185c4000000 rw-p 00000000 00:00 0 
7f1b2fd5c000-7f1b2ff00000 rw-p 00000000 00:00 0 
7ffec67cc000-7ffec67ed000 rw-p 00000000 00:00 0                          [stack]
`)
	got := heapSpans(maps, 0x2185a6000000)
	want := []span{{0x2185a0000000, 0x2185a4000000}, {0x2185a5c00000, 0x2185ac400000}, {0x2185b0000000, 0x2185b0400000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("heap spans %x, want %x (the adjacent anonymous run, read-write parts rounded inward to 2 MiB)", got, want)
	}
	if got := heapSpans(maps, 0x7ffec67cd000); got != nil {
		t.Fatalf("a named mapping is not the heap: %x", got)
	}
	if got := heapSpans(maps, 0x1000); got != nil {
		t.Fatalf("an unmapped address: %x", got)
	}
}

func TestCoverage(t *testing.T) {
	var done []span
	for _, s := range []span{{10, 20}, {30, 40}, {20, 30}, {5, 8}, {50, 60}, {8, 9}} {
		done = cover(done, s)
	}
	if want := []span{{5, 9}, {10, 40}, {50, 60}}; fmt.Sprint(done) != fmt.Sprint(want) {
		t.Fatalf("cover: %v, want %v", done, want)
	}
	for _, tc := range []struct {
		s    span
		want []span
	}{
		{span{0, 100}, []span{{0, 5}, {9, 10}, {40, 50}, {60, 100}}},
		{span{12, 38}, nil},
		{span{35, 55}, []span{{40, 50}}},
		{span{70, 80}, []span{{70, 80}}},
	} {
		if got := uncovered(done, tc.s); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("uncovered(%v) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// reserve is Reserve(n, ahead), skipping t where the kernel has no transparent huge pages and failing it
// on any other error.
func reserve(t *testing.T, n, ahead int) (*Heap, Stats) {
	t.Helper()
	h, st, err := Reserve(n, ahead)
	if errors.Is(err, ErrUnsupported) {
		t.Skip("this kernel has no transparent huge pages")
	}
	if err != nil {
		t.Fatal(err)
	}
	return h, st
}

// advised is IsAdvised, failing t when smaps cannot say.
func advised(t *testing.T, addr uintptr) bool {
	t.Helper()
	yes, err := IsAdvised(addr)
	if err != nil {
		t.Fatal(err)
	}
	return yes
}

// TestReserveThenGrowth: the reservation's mapping is advised (VmFlags hg), the heap's later growth is
// not until Advise runs, and then is; what the growth took of the pages faulted in ahead, Advise faults
// in again.
func TestReserveThenGrowth(t *testing.T) {
	if testutil.Alone(t) {
		return
	}
	h, st := reserve(t, 32<<20, 16<<20)
	if st.Mappings == 0 || st.Bytes < 32<<20 {
		t.Fatalf("reserve advised %+v, want at least the 32 MiB reserved", st)
	}
	if !advised(t, h.anchor) {
		t.Fatalf("the reservation's mapping at %#x is not advised", h.anchor)
	}
	populates := populateSupported(t)
	if populates && !topped(st, 16<<20) {
		t.Fatalf("reserve found %d bytes ahead and populated %d, want 16 MiB ahead after it", st.Ahead, st.Populated)
	}
	// More than the heap has free at once: the runtime maps new arena space, which it does not advise.
	// (It may start in free heap space; its last byte is in the new mapping.)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	grown := make([]byte, int(ms.HeapIdle)+64<<20)
	at := uintptr(unsafe.Pointer(unsafe.SliceData(grown))) + uintptr(len(grown)) - 1
	if advised(t, at) {
		t.Fatalf("heap growth at %#x is advised before Advise ran; the test needs a fresh mapping", at)
	}
	st, err := h.Advise()
	if err != nil {
		t.Fatal(err)
	}
	if st.Mappings == 0 || !advised(t, at) {
		t.Fatalf("after Advise (%+v) the grown heap at %#x is not advised", st, at)
	}
	// The allocation, untouched, is in use to the runtime and absent to the kernel: nothing counts as
	// ahead of the runtime any more, and the pass faulted the budget in again (the lowest absent pages:
	// the allocation's, which it will use).
	if populates && (st.Ahead >= 8<<20 || !topped(st, 16<<20)) {
		t.Fatalf("after the heap grew by an untouched allocation, Advise found %d bytes ahead and populated %d, want under half the 16 MiB budget and then 16 MiB ahead", st.Ahead, st.Populated)
	}
	if again, _ := h.Advise(); again.Mappings != 0 {
		t.Fatalf("a second pass advised %+v again", again)
	}
	runtime.KeepAlive(grown)
}

// TestReservePopulated: Reserve faults in what it was asked to keep ahead, as huge pages when the kernel
// has them free, and no more: the heap's resident memory beyond what the runtime holds is that budget,
// however large the reservation. The pages stay resident through a scavenge of the heap's free memory
// (debug.FreeOSMemory), which would otherwise hand them back to the kernel.
func TestReservePopulated(t *testing.T) {
	if testutil.Alone(t) {
		return
	}
	h, st := reserve(t, 256<<20, 16<<20)
	if !populateSupported(t) {
		t.Skip("MADV_POPULATE_WRITE needs Linux 5.14")
	}
	if !topped(st, 16<<20) {
		t.Fatalf("populated %d bytes with %d ahead before, want 16 MiB ahead after it", st.Populated, st.Ahead)
	}
	if extra := residentBeyondRuntime(t, h); extra < 12<<20 || extra > 20<<20 {
		t.Fatalf("the heap holds %d MiB beyond the runtime's use, want the 16 MiB ahead (not the 256 MiB reserved)", extra>>20)
	}
	debug.FreeOSMemory()
	if extra := residentBeyondRuntime(t, h); extra < 12<<20 {
		t.Fatalf("after a scavenge the heap holds %d MiB beyond the runtime's use: it released the 16 MiB ahead", extra>>20)
	}
	// The runtime takes the lowest free pages first: an allocation of the budget's size lands on pages
	// faulted in ahead, and once it is written the next pass faults the budget in again.
	used := make([]byte, 16<<20)
	for i := range used {
		used[i] = 1
	}
	again, err := h.Advise()
	if err != nil {
		t.Fatal(err)
	}
	if again.Populated == 0 {
		t.Fatalf("after the runtime used pages faulted in ahead, Advise found %d MiB ahead and faulted none in", again.Ahead>>20)
	}
	if extra := residentBeyondRuntime(t, h); extra > 20<<20 {
		t.Fatalf("after the top-up the heap holds %d MiB beyond the runtime's use, want at most the 16 MiB budget", extra>>20)
	}
	runtime.KeepAlive(used)
}

// topped reports whether a pass that found st.Ahead bytes ahead and faulted st.Populated in left the
// budget ahead, to the huge page it rounds down to.
func topped(st Stats, budget int) bool {
	after := st.Ahead + st.Populated
	return after > budget-hugeSize && after <= budget
}

// residentBeyondRuntime is the advised heap's resident memory (mincore) less what the runtime holds
// there (its heap and stack spans not released to the kernel).
func residentBeyondRuntime(t *testing.T, h *Heap) int {
	t.Helper()
	h.mu.Lock()
	done := slices.Clone(h.done)
	h.mu.Unlock()
	var res int
	for _, s := range done {
		res += residentBytes(t, s.start, s.end-s.start)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return res - int(ms.HeapSys-ms.HeapReleased+ms.StackInuse)
}

// TestReserveTouchesNothing: making the reservation writes none of it, though the heap has freed memory
// for the runtime to reuse (which a large allocation reaching into it would have zeroed whole): the
// process's peak resident set grows by far less than the reservation.
func TestReserveTouchesNothing(t *testing.T) {
	if testutil.Alone(t) {
		return
	}
	used := make([]byte, 64<<20)
	for i := range used {
		used[i] = 1
	}
	runtime.KeepAlive(used)
	used = nil
	runtime.GC()
	// Reset the peak (VmHWM) to the resident set now.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident set: %v", err)
	}
	before := statusKiB(t, "VmRSS")
	reserve(t, 512<<20, 0)
	if grew := statusKiB(t, "VmHWM") - before; grew > 128<<10 {
		t.Fatalf("the peak resident set grew by %d MiB while reserving 512 MiB with nothing asked ahead", grew>>10)
	}
}

// statusKiB is a "kB" line of /proc/self/status.
func statusKiB(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			var kb int
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return kb
		}
	}
	t.Fatalf("/proc/self/status has no %s", key)
	return 0
}

// TestReserveUnderMemoryLimit: under a memory limit the reservation is faulted in only as far as the
// limit leaves room beside what the runtime holds (the rest is faulted on use), since the runtime counts
// the reservation's pages released until it allocates them.
func TestReserveUnderMemoryLimit(t *testing.T) {
	if testutil.Alone(t) {
		return
	}
	if !populateSupported(t) {
		t.Skip("MADV_POPULATE_WRITE needs Linux 5.14")
	}
	// What the runtime holds as Reserve counts it: after handing its free memory back (Reserve does that
	// before it looks), not merely after a GC, whose freed pages Reserve's own scavenge then releases.
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	limit := int64(ms.Sys-ms.HeapReleased) + 8<<20
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	_, st := reserve(t, 64<<20, 64<<20)
	if st.Populated > 8<<20 {
		t.Fatalf("under a limit 8 MiB above what the runtime held, %d MiB of a 64 MiB reservation were faulted in", st.Populated>>20)
	}
}

// residentBytes is how much of [start, start+n) is in memory (mincore).
func residentBytes(t *testing.T, start, n uintptr) int {
	t.Helper()
	vec := make([]byte, (n+pageSize-1)/pageSize)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, start, n, uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
		t.Fatalf("mincore(%#x, %d): %v", start, n, e)
	}
	res := 0
	for _, v := range vec {
		res += int(v&1) * pageSize
	}
	return res
}

// populateSupported: the kernel is 5.14 or later, which has MADV_POPULATE_WRITE.
func populateSupported(t *testing.T) bool {
	t.Helper()
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var rel []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(rel), "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", rel, err)
	}
	return major > 5 || major == 5 && minor >= 14
}

// TestMapped: the mapping is the size asked rounded up to huge pages, starts on a huge-page boundary and
// is advised (VmFlags hg) before anything touches it.
func TestMapped(t *testing.T) {
	buf, release, err := Mapped(3<<20 + 5)
	if errors.Is(err, ErrUnsupported) {
		t.Skip("this kernel has no transparent huge pages")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	at := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	if len(buf) != 4<<20 || at%hugeSize != 0 {
		t.Fatalf("Mapped(3 MiB + 5): %d bytes at %#x, want 4 MiB on a 2 MiB boundary", len(buf), at)
	}
	if !advised(t, at) || !advised(t, at+uintptr(len(buf))-1) {
		t.Fatalf("the mapping at %#x is not advised", at)
	}
	buf[0], buf[len(buf)-1] = 1, 2
}

// TestKeepRunsIdle: Keep's pass runs on a thread of its own under SCHED_IDLE, which ends with Stop, so
// that no thread of the runtime's pool is left at that priority.
func TestKeepRunsIdle(t *testing.T) {
	h, _ := reserve(t, 4<<20, 0)
	if idle, _ := idleThreads(t); idle != 0 {
		t.Fatalf("%d threads under SCHED_IDLE before Keep", idle)
	}
	h.Keep(time.Hour)
	waitIdleThreads(t, 1)
	h.Stop()
	waitIdleThreads(t, 0)
}

// TestKeepLeavesMainThread: Keep's goroutine, started on the main thread (which the runtime never ends),
// moves the pass to another thread and leaves the main thread at its priority. Without the move the
// main thread stays SCHED_IDLE after Stop (TestKeepRunsIdle failed so about once in a hundred runs).
func TestKeepLeavesMainThread(t *testing.T) {
	h, _ := reserve(t, 4<<20, 0)
	h.stop = make(chan struct{})
	t.Cleanup(h.Stop) // on a failure too: without the move, the main thread runs the pass until Stop
	started := make(chan struct{})
	onMain <- func() {
		if !mainThread() {
			t.Error("the function did not run on the main thread")
		}
		// keep returns on the main thread once its successor holds a thread of its own.
		h.keep(time.Hour, started)
	}
	<-started
	waitIdleThreads(t, 1)
	if _, main := idleThreads(t); main {
		t.Fatal("the main thread runs SCHED_IDLE")
	}
	h.Stop()
	waitIdleThreads(t, 0)
}

// onMain runs functions on the main thread, which init locks the main goroutine to, for
// TestKeepLeavesMainThread.
var onMain = make(chan func())

func init() { runtime.LockOSThread() }

// TestMain runs the tests on a goroutine of their own while the main goroutine, on the main thread,
// serves onMain.
func TestMain(m *testing.M) {
	code := make(chan int)
	go func() { code <- m.Run() }()
	for {
		select {
		case fn := <-onMain:
			fn()
		case c := <-code:
			os.Exit(c)
		}
	}
}

// waitIdleThreads waits, up to 10 s, until want threads of the process run under SCHED_IDLE.
func waitIdleThreads(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n, _ := idleThreads(t)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d threads under SCHED_IDLE, want %d", n, want)
		}
	}
}

// idleThreads counts the process's threads whose scheduling policy (field 41 of /proc/self/task/*/stat)
// is SCHED_IDLE (5), and whether the main thread (the task whose id is the process's) is one of them.
func idleThreads(t *testing.T) (n int, main bool) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		// The fields after the command's closing parenthesis start at the third.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 41-2 {
			t.Fatalf("/proc/self/task/%s/stat: %q", task.Name(), b)
		}
		if f[41-3] == "5" {
			n++
			main = main || task.Name() == strconv.Itoa(os.Getpid())
		}
	}
	return n, main
}
